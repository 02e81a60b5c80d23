"""The dashboard pages' one script (pure: a constant), inlined by :mod:`.dashpages`.

Without it a page is complete and static. With it the page stays live over ``GET /v1/events``:
the element ``#live`` names the event kinds that concern it (``data-kinds``), the run it shows
(``data-run``, empty on the runs index) and the beacon period (``data-period-ms``). On such an
event (of that run, or naming no run) it fetches the page's own URL once and swaps in the new
``#live`` (rendered and escaped by the server, so the script holds no markup of its own); events
that arrive meanwhile are coalesced into one fetch, at most one per beacon period, never
polling. ``#live-status`` says whether the stream is connected and when the page last changed.
"""

from __future__ import annotations

from typing import Final

__all__ = ["LIVE_SCRIPT"]

LIVE_SCRIPT: Final = """
"use strict";
(() => {
  const live = document.getElementById("live");
  const status = document.getElementById("live-status");
  if (!live || !window.EventSource || !window.fetch) return;
  const kinds = (live.dataset.kinds || "").split(",").filter(Boolean);
  if (!kinds.length) return;
  const run = live.dataset.run || "";
  const period = Math.max(1000, Number(live.dataset.periodMs) || 3000);
  let last = 0, timer = null, busy = false;
  const say = (text) => { if (status) status.textContent = text; };
  async function refresh() {
    timer = null;
    if (busy) { schedule(); return; }
    busy = true;
    last = Date.now();
    try {
      const answer = await fetch(location.href, {headers: {"Accept": "text/html"}});
      if (!answer.ok) throw new Error("HTTP " + answer.status);
      const page = new DOMParser().parseFromString(await answer.text(), "text/html");
      const fresh = page.getElementById("live");
      if (fresh) live.replaceChildren(...fresh.childNodes);
      live.dataset.updates = String(Number(live.dataset.updates || "0") + 1);
      say("live: updated " + new Date().toLocaleTimeString());
    } catch (e) {
      say("live: update failed (" + e.message + "), will retry on the next event");
    } finally {
      busy = false;
    }
  }
  function schedule() {
    if (timer !== null) return;
    timer = setTimeout(refresh, Math.max(0, last + period - Date.now()));
  }
  const events = new EventSource("/v1/events?kinds=" + encodeURIComponent(kinds.join(",")));
  for (const kind of kinds) {
    events.addEventListener(kind, (event) => {
      let data = {};
      try { data = JSON.parse(event.data); } catch (e) { data = {}; }
      if (run && data && data.run_id && data.run_id !== run) return;
      schedule();
    });
  }
  events.onopen = () => say("live: connected to /v1/events");
  events.onerror = () => say("live: reconnecting to /v1/events");
})();
"""
