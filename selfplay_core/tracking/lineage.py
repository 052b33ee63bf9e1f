"""The curriculum lineage view: for each goalpost, the lemmas the teacher wrote from it and the
lifts written from each lemma, with axis, the student's pass rate, the teacher's reward, whether
it was trained on and (toy world) whether its text describes its code; and when, if ever, the
goalpost was later solved. One self-contained HTML page per run (an MLflow artifact), readable
without code — the project's version of the GASP paper's lineage figures.

Records are plain dicts (`record(proposal, iteration)`), kept in the run state so a resumed run
renders the whole history.
"""

from __future__ import annotations

import html
from typing import Sequence

MAX_TEXT = 240


def record(p, iteration: int, trained_ids: frozenset | set = frozenset()) -> dict:
    """What the view needs of one proposal (a `records.Proposal`)."""
    parsed = getattr(p, "parsed", None)
    question = getattr(parsed, "question", None)
    return {"id": p.id, "iteration": iteration, "kind": p.kind, "goalpost": p.anchor.goalpost_id,
            "parent": p.anchor.id, "axis": p.axis, "question": (question or "")[:MAX_TEXT],
            "accepted": p.accepted, "rejection": p.rejection, "pass_rate": p.pass_rate,
            "reward": p.reward, "faithful": p.faithful,
            "trained": p.problem is not None and p.problem.id in trained_ids}


def first_solved(labels: Sequence[str], rows: Sequence[Sequence[float]], ids: Sequence[str]) -> dict:
    """goalpost id -> the first checkpoint label whose row has pass rate > 0 for it."""
    out = {}
    for label, row in zip(labels, rows):
        for gid, v in zip(ids, row):
            if v > 0 and gid not in out:
                out[gid] = label
    return out


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222}
h1{font-size:20px;margin:0 0 4px} .sub{color:#666;font-size:13px;margin-bottom:16px}
.gp{border:1px solid #ddd;border-radius:6px;margin:14px 0;padding:10px 12px}
.gp h2{font-size:15px;margin:0 0 4px} .q{font-size:13px;color:#333}
.solved{background:#e6f4ea;color:#137333;border-radius:4px;padding:1px 6px;font-size:12px}
.unsolved{background:#f1f3f4;color:#5f6368;border-radius:4px;padding:1px 6px;font-size:12px}
table{border-collapse:collapse;width:100%;margin-top:6px;font-size:12px}
th{text-align:left;color:#555;font-weight:600;border-bottom:1px solid #ccc;padding:3px 6px}
td{border-bottom:1px solid #eee;padding:3px 6px;vertical-align:top}
tr.lift td:first-child{padding-left:26px} tr.rej td{color:#999}
.y{color:#137333;font-weight:600} .n{color:#c5221f;font-weight:600}
.band{background:#fff4ce} .tr{background:#e8f0fe}
.legend{font-size:12px;color:#555;margin:8px 0 0}
.spark{font-family:monospace;letter-spacing:1px}
"""


def _fmt(v, spec="{:.2f}") -> str:
    return "-" if v is None else spec.format(v)


def _yn(v) -> str:
    if v is None:
        return "-"
    return '<span class="y">yes</span>' if v else '<span class="n">no</span>'


def _row(r: dict, cls: str, bands: dict) -> str:
    lo, hi = bands.get(r["kind"], (None, None))
    p = r["pass_rate"]
    pcls = "band" if p is not None and lo is not None and lo <= p <= hi else ""
    status = "accepted" if r["accepted"] else f"rejected: {html.escape(str(r['rejection']))}"
    if r["accepted"] and r.get("trained"):
        status += " · trained"
    return (f'<tr id="{html.escape(str(r["id"]), quote=True)}" class="{cls}{" rej" if not r["accepted"] else ""}">'
            f'<td>{html.escape(r["kind"])}</td><td>{r["iteration"]}</td><td>{html.escape(str(r["axis"]))}</td>'
            f'<td>{html.escape(r["question"]) or "<i>(unparsed)</i>"}</td>'
            f'<td class="{pcls}">{_fmt(p)}</td><td>{_fmt(r["reward"])}</td><td>{_yn(r["faithful"])}</td>'
            f'<td class="{"tr" if r.get("trained") else ""}">{status}</td></tr>')


def render(records: Sequence[dict], goalposts: Sequence[dict], *, title: str,
           solved: dict | None = None, pass_rates: dict | None = None, labels: Sequence[str] = (),
           bands: dict | None = None, max_per_goalpost: int = 40) -> str:
    """The page. goalposts: [{"id", "question"}]; solved: id -> first checkpoint label that hit
    it; pass_rates: id -> per-checkpoint pass rates (shown as a row of numbers); bands: kind ->
    (low, high) of the teacher's reward band (pass rates inside are highlighted)."""
    solved, pass_rates, bands = solved or {}, pass_rates or {}, bands or {}
    by_gp: dict = {}
    children: dict = {}
    for r in records:
        if r["kind"] == "lift":
            children.setdefault(r["parent"], []).append(r)
        else:
            by_gp.setdefault(r["goalpost"], []).append(r)
    n_acc = sum(r["accepted"] for r in records)
    fid = [r["faithful"] for r in records if r["accepted"] and r["faithful"] is not None]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             f'<div class="sub">{len(records)} proposals ({n_acc} accepted'
             + (f", {sum(fid)}/{len(fid)} faithful" if fid else "") +
             f"); {sum(1 for g in goalposts if g['id'] in solved)}/{len(goalposts)} goalposts solved "
             "at some checkpoint. Each goalpost lists the lemmas written from it (newest last); each "
             "lemma is followed by the lifts written from it (indented), which never saw the goalpost."
             '<div class="legend">pass rate = the student\'s share of passing samples; '
             '<span class="band">highlighted</span> when inside the teacher\'s reward band; '
             '<span class="tr">trained</span> = in the student\'s batch; faithful = the toy '
             "oracle's verdict that the question describes the code (a diagnostic, never a reward)."
             "</div></div>"]
    order = sorted(goalposts, key=lambda g: (g["id"] not in solved, -len(by_gp.get(g["id"], [])), g["id"]))
    for g in order:
        gid = g["id"]
        rows = by_gp.get(gid, [])
        badge = (f'<span class="solved">solved at {html.escape(str(solved[gid]))}</span>' if gid in solved
                 else '<span class="unsolved">not solved</span>')
        spark = ""
        if gid in pass_rates:
            spark = ('<div class="q spark">pass rate per checkpoint: ' + " ".join(
                f"{html.escape(str(lb))}={v:.2f}" for lb, v in zip(labels, pass_rates[gid])) + "</div>")
        parts.append(f'<div class="gp"><h2>{html.escape(gid)} {badge}</h2>'
                     f'<div class="q">{html.escape(g.get("question") or "")}</div>{spark}')
        if rows:
            parts.append("<table><tr><th>kind</th><th>iter</th><th>axis</th><th>question</th>"
                         "<th>pass rate</th><th>reward</th><th>faithful</th><th>status</th></tr>")
            for r in rows[:max_per_goalpost]:
                parts.append(_row(r, "", bands))
                for c in children.get(r["id"], []):
                    parts.append(_row(c, "lift", bands))
            if len(rows) > max_per_goalpost:
                parts.append(f"<tr><td colspan=8>... {len(rows) - max_per_goalpost} more</td></tr>")
            parts.append("</table>")
        else:
            parts.append('<div class="q"><i>no lemma was written from this goalpost</i></div>')
        parts.append("</div>")
    parts.append("</body></html>")
    return "\n".join(parts)
