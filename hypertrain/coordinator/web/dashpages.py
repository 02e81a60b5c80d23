"""The run dashboard's HTML (pure: values in, a page out; the routes are :mod:`.dashboard`).

- :func:`runs_page`: ``GET /``, the runs with their status and a link to each;
- :func:`run_page`: ``GET /runs/{id}``, a :class:`~hypertrain.coordinator.flows.dashboard.
  RunBoard`: the held-out loss chart (:mod:`.lossplot`), the rounds table (a page, newest first,
  with links to older and newer pages), the newest round's miners with their scores, verdicts
  and ledger balances, the audit and honeypot rates, the disputes;
- :func:`error_page`: a 4xx as a page that names the problem.

Every value from the database or the ledger goes through :func:`esc` (hotkeys, handles, states
and reasons are hostile input); numbers are formatted, never pasted. The pages are complete
without JavaScript and fetch nothing from anywhere: no fonts, no third-party files, the style
and the one script (:data:`~hypertrain.coordinator.web.livescript.LIVE_SCRIPT`) inline.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

from hypertrain.coordinator.flows.dashboard import SETTLED_HOW, RoundLine, RunBoard
from hypertrain.coordinator.flows.runview import RunListed
from hypertrain.coordinator.web.livescript import LIVE_SCRIPT
from hypertrain.coordinator.web.lossplot import loss_chart
from hypertrain.ledger import HotkeyAccount
from hypertrain.protocol.f32 import f32_from_hex, is_f32_hex

__all__ = ["RUNS_KINDS", "RUN_KINDS", "error_page", "esc", "run_page", "runs_page"]

RUN_KINDS: Final = "round_state,heldout,audit,dispute,run,checkpoint"
"""The ``/v1/events`` kinds a run's page follows."""
RUNS_KINDS: Final = "run,round_state"
"""The kinds the runs index follows."""
_DASH: Final = "\u2013"
_STYLE: Final = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em 2em; color: #1d1d1f; }
h1 { font-size: 1.35em; margin-bottom: .2em; } h2 { font-size: 1.05em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .4em 0; }
td, th { padding: 2px 10px; text-align: left; }
th { border-bottom: 1px solid #999; font-weight: 600; }
tr:nth-child(even) td { background: #f4f5f7; }
.num { text-align: right; font-variant-numeric: tabular-nums; } .muted { color: #6e6e73; }
code, .hk { font-family: ui-monospace, monospace; font-size: 12px; }
nav a { margin-right: 1.2em; } .chart { background: #fbfbfd; max-width: 100%; height: auto; }
.chart .frame { fill: none; stroke: #c7c7cc; }
.chart .line { fill: none; stroke: #0a66c2; stroke-width: 2; }
.chart .pt { fill: #0a66c2; } .chart text { font: 11px system-ui, sans-serif; fill: #6e6e73; }
.bad { color: #b3261e; font-weight: 600; } #live-status { font-size: 12px; }
"""


def esc(value: object) -> str:
    """``value`` as HTML text, quotes included (safe in text and attribute values)."""
    return html.escape(str(value), quote=True)


def _num(value: object, fmt: str = "{:.4f}") -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _DASH
    return fmt.format(value)


def _loss(hex_value: object) -> str:
    """A score's f32 hex objective as a number (the raw text, escaped, when it is not one)."""
    if hex_value is None:
        return _DASH
    return _num(f32_from_hex(str(hex_value))) if is_f32_hex(hex_value) else esc(hex_value)


def _table(head: Sequence[str], rows: Iterable[str], body_id: str, empty: str) -> str:
    cells = "".join(
        f'<th class="num">{name[1:]}</th>' if name.startswith("#") else f"<th>{name}</th>"
        for name in head
    )
    body = (
        "".join(rows)
        or f'<tr class="empty"><td colspan="{len(head)}" class="muted">{empty}</td></tr>'
    )
    return f'<table><thead><tr>{cells}</tr></thead><tbody id="{body_id}">{body}</tbody></table>'


def _row(*cells: str, num_from: int = 1) -> str:
    return (
        "<tr>"
        + "".join(
            f'<td class="num">{c}</td>' if i >= num_from else f"<td>{c}</td>"
            for i, c in enumerate(cells)
        )
        + "</tr>"
    )


def _run_href(run_id: object) -> str:
    return f"/runs/{quote(str(run_id), safe='')}"


def _document(title: str, body: str, *, kinds: str, run: str = "", period_ms: int = 0) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>"
        '<nav><a href="/">runs</a><a href="/compute">compute network</a>'
        '<a href="/v1/runs">JSON</a></nav>'
        f'<p id="live-status" class="muted">static page (live updates need JavaScript)</p>'
        f'<main id="live" data-kinds="{esc(kinds)}" data-run="{esc(run)}"'
        f' data-period-ms="{int(period_ms)}" data-updates="0">{body}</main>'
        f"<script>{LIVE_SCRIPT}</script></body></html>"
    )


def runs_page(runs: Sequence[RunListed], *, now_round: int, period_ms: int) -> str:
    """``GET /``: ``runs`` are :func:`~hypertrain.coordinator.flows.runview.runs_list`'s."""
    rows = [
        _row(
            f'<a href="{_run_href(r.run_id)}"><code>{esc(r.run_id)}</code></a>',
            esc(r.status),
            num_from=9,
        )
        for r in runs
    ]
    body = (
        "<h1>hypertrain runs</h1>"
        f'<p class="muted">beacon round D = {int(now_round)}; public data only, the same as '
        "<code>/v1/runs</code>.</p>" + _table(["run", "status"], rows, "runs", "no run yet")
    )
    return _document("hypertrain runs", body, kinds=RUNS_KINDS, period_ms=period_ms)


def _round_row(line: RoundLine) -> str:
    settled = " / ".join(str(line.settled[how]) for how in SETTLED_HOW)
    audits = (
        _DASH if line.selected is None else f"{line.selected} / {line.replayed} / {line.caught}"
    )
    return _row(
        str(line.w),
        esc(line.state),
        f"{line.uploaded} / {line.rostered}",
        _num(line.update_norm),
        _num(line.clipped, "{:d}"),
        _num(line.heldout_loss),
        _num(line.heldout_loss_after),
        f"{settled} of {line.steps}",
        audits,
        num_from=2,
    )


def _pager(board: RunBoard) -> str:
    base = _run_href(board.run_id)
    page = board.paging
    offset, limit, after = int(page["offset"]), int(page["limit"]), page["next_offset"]
    links = []
    if offset > 0:
        links.append(f'<a href="{base}?limit={limit}" rel="first">newest rounds</a>')
        newer = max(0, offset - limit)
        links.append(f'<a href="{base}?offset={newer}&amp;limit={limit}" rel="prev">newer</a>')
    if after is not None:
        links.append(f'<a href="{base}?offset={int(after)}&amp;limit={limit}" rel="next">older</a>')
    shown = f"rounds {offset + 1}\u2013{offset + len(board.rounds)} from the newest"
    return f'<p id="pager">{shown} {" ".join(links)}</p>'


def _miner_rows(view: Mapping[str, Any], balances: Mapping[str, HotkeyAccount] | None) -> list[str]:
    verdicts = {job.get("target"): job for job in view.get("jobs") or []}
    rows = []
    for miner in view.get("miners") or []:
        hotkey = miner.get("hotkey")
        scores = miner.get("scores") or {}
        job = verdicts.get(hotkey)
        verdict = _DASH if job is None else esc(job.get("result") or job.get("state"))
        account = None if balances is None else balances.get(str(hotkey))
        money = (
            (_DASH, _DASH, _DASH)
            if account is None
            else (str(account.pending), str(account.paid), str(account.burned))
        )
        rows.append(
            _row(
                f'<span class="hk">{esc(hotkey)}</span>',
                esc(miner.get("status")),
                _loss((scores.get("public") or {}).get("loss")),
                _loss((scores.get("hidden") or {}).get("loss")),
                _num(miner.get("soft_score_ppm"), "{:d}"),
                "yes" if miner.get("selected") else "no",
                verdict,
                *money,
                num_from=2,
            )
        )
    return rows


def _miners(board: RunBoard, balances: Mapping[str, HotkeyAccount] | None) -> str:
    view = board.newest
    if view is None:
        return '<h2>Miners</h2><p class="muted">no round open yet</p>'
    w = int(view["w"])
    json_link = f"/v1/runs/{quote(board.run_id, safe='')}/rounds/{w}"
    more = view.get("page") or {}
    note = (
        f' <a href="{json_link}?offset={int(more["next_offset"])}">more miners (JSON)</a>'
        if more.get("next_offset") is not None
        else ""
    )
    ledger = "" if balances is not None else " (no ledger on this daemon)"
    head = ["miner", "status", "#public loss", "#hidden loss", "#soft score ppm", "#audited"]
    head += ["#verdict", "#pending", "#paid", "#burned"]
    return (
        f"<h2>Miners of round {w}</h2>"
        f'<p class="muted">scores of their deltas, audit verdicts and ledger balances in units'
        f'{ledger}; <a href="{json_link}">round {w} as JSON</a>{note}</p>'
        + _table(head, _miner_rows(view, balances), "miners", "no miner in this round")
    )


def _rate(value: object) -> str:
    return _num(value, "{:.0%}") if value is not None else _DASH


def _audits(board: RunBoard) -> str:
    rows = [
        _row(
            str(e.epoch),
            str(e.audits),
            str(e.catches),
            str(e.overturned),
            _rate(e.honeypot_catch_rate),
            _rate(e.honeypot_false_positive_rate),
        )
        for e in board.epochs
    ]
    head = ["epoch", "#audits", "#caught", "#overturned", "#honeypots caught"]
    head.append("#honest honeypots flagged")
    counts = ", ".join(f"{esc(state)} {n}" for state, n in sorted(board.disputes.items()))
    disputes = [
        _row(
            f"<code>{esc(d.dispute_id[:16])}</code>",
            str(d.w),
            f'<span class="hk">{esc(d.hotkey)}</span>',
            esc(d.state),
            esc((d.outcome or {}).get("loser_role", _DASH)),
            num_from=9,
        )
        for d in board.recent_disputes
    ]
    return (
        "<h2>Audits and honeypot rates</h2>"
        + _table(head, rows, "audits", "no verdict yet")
        + f'<h2>Disputes</h2><p class="muted">{counts or "none"}</p>'
        + (
            _table(["dispute", "round", "miner", "state", "loser"], disputes, "disputes", "")
            if disputes
            else ""
        )
    )


def run_page(
    board: RunBoard, balances: Mapping[str, HotkeyAccount] | None, *, period_ms: int
) -> str:
    """``GET /runs/{id}`` (module doc); ``balances`` by hotkey, None without a ledger."""
    points = board.loss_points()
    roster = board.roster
    head = ["round", "state", "#uploaded", "#update norm", "#clipped", "#loss \u03b8(w)"]
    head += ["#loss \u03b8(w+1)", "#scored agree / 3rd / fallback", "#audits sel / rep / caught"]
    body = (
        f"<h1>run <code>{esc(board.run_id)}</code></h1>"
        f'<p class="muted">status {esc(board.status)}; beacon round D = {int(board.now_round)};'
        f" roster {roster.active} active of {roster.total} ({roster.removed} removed,"
        f" {roster.blacklisted} blacklisted). Public data only: the same as"
        f' <a href="/v1/runs/{quote(board.run_id, safe="")}">the run\'s JSON view</a>.</p>'
        f"<h2>Held-out loss of \u03b8(t)</h2>{loss_chart(points)}"
        f'<p class="muted" id="chart-note">{len(points)} points: the loss of the start weights'
        " of each round shown and of the last merge's result, on the operator's private"
        " holdout.</p>"
        f"<h2>Rounds</h2>{_pager(board)}"
        + _table(head, (_round_row(line) for line in board.rounds), "rounds", "no round yet")
        + _miners(board, balances)
        + _audits(board)
    )
    return _document(
        f"hypertrain run {board.run_id[:16]}",
        body,
        kinds=RUN_KINDS,
        run=board.run_id,
        period_ms=period_ms,
    )


def error_page(status: int, detail: str) -> str:
    """A 4xx as a page: the status and ``detail``, escaped, with a way back."""
    body = f'<h1>{int(status)}</h1><p class="bad" id="detail">{esc(detail)}</p>'
    return _document(f"hypertrain: {int(status)}", body, kinds="")
