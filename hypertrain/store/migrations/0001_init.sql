-- 0001_init: the first tables of a state directory.
--
-- meta:    small settings of this state directory (e.g. the run id it serves), key -> text.
-- objects: objects of the content-addressed store this daemon has accepted. A row is written
--          only after the object file is durable (fsynced and renamed), so a row never points to
--          a missing object; an object without a row is an orphan a later sweep may remove.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE objects (
    sha256     TEXT PRIMARY KEY NOT NULL
               CHECK (length(sha256) = 64 AND sha256 NOT GLOB '*[^0-9a-f]*'),
    size       INTEGER NOT NULL CHECK (size >= 0),
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
