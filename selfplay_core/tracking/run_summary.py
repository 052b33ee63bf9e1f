"""What a finished self-play run prints: the per-iteration table and, in words, how the run went
against its start checkpoint (held-out pass@k, goalposts). Pure functions of the run's history
(`RunState.history`: one dict of metrics per step, step 0 = the start checkpoint)."""

from __future__ import annotations

import math
from typing import Sequence

# The table's columns, in this order, where the run has them.
# goalposts/floor: the goalposts k samples of the start model are expected to hit, beside the
# goalposts solved (an expected count, so printed with decimals).
TABLE_METRICS = ("eval/all/pass@1", "eval/all/pass@{k}", "goalposts/solved", "goalposts/solved_union",
                 "goalposts/floor", "goalposts/floor_union",
                 "student/accepted/reward", "student/real/pass_rate", "teacher/lemma/acceptance",
                 "teacher/lift/acceptance", "teacher/azr/acceptance",
                 "targets/cumulative_solve_rate", "targets/fit/A")
# Metrics that count things: printed as integers.
COUNT_SUFFIXES = ("solved", "solved_union", "total", "tasks", "size", "count")
LEARNING_STUDY = "docs/results.md"


def is_count(metric: str) -> bool:
    return metric.rsplit("/", 1)[-1] in COUNT_SUFFIXES


def largest_k(history: Sequence[dict]) -> int | None:
    ks = {int(key.rsplit("@", 1)[1]) for h in history for key in h
          if key.startswith("eval/all/pass@") and key.rsplit("@", 1)[1].isdigit()}
    ks.discard(1)
    return max(ks) if ks else None


def table_columns(history: Sequence[dict]) -> list[str]:
    k = largest_k(history)
    cols = [c.format(k=k) for c in TABLE_METRICS if "{k}" not in c or k is not None]
    return [c for c in cols if any(c in h for h in history)]


def fmt(metric: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if is_count(metric):
        return str(int(round(value)))
    return f"{value:.3f}"


def metrics_table(history: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    """One row per step; each column headed by its full metric name, split at its last '/'
    over two lines (e.g. 'eval/all' above 'pass@1') so that the table stays narrow."""
    columns = list(columns if columns is not None else table_columns(history))
    heads = [(c.rsplit("/", 1) if "/" in c else ["", c]) for c in columns]
    widths = [max(len(a), len(b), 5) for a, b in heads]
    lines = ["      " + "  ".join(f"{a:>{w}}" for (a, _), w in zip(heads, widths)),
             "step  " + "  ".join(f"{b:>{w}}" for (_, b), w in zip(heads, widths))]
    for h in history:
        lines.append(f"{h['step']:>4}  " + "  ".join(
            f"{fmt(c, h.get(c)):>{w}}" for c, w in zip(columns, widths)))
    return "\n".join(lines)


def _diff_se(p0: float, p1: float, samples: int) -> float:
    """Standard error of the difference of two pass rates, each estimated from `samples`
    draws (binomial; the same problems at both ends, so this is a rough, conservative band)."""
    return math.sqrt((p0 * (1 - p0) + p1 * (1 - p1)) / samples)


def _compare(name: str, start: float, end: float, samples: int | None) -> str:
    delta = end - start
    text = f"{name}: {start:.3f} at the start, {end:.3f} at the end ({delta:+.3f})"
    if samples:
        band = 2 * _diff_se(start, end, samples)
        if abs(delta) <= band:
            return f"{text}: about the same as the start (within sampling noise, ±{band:.3f})."
        word = "better" if delta > 0 else "worse"
        return f"{text}: {word} than the start (beyond sampling noise, ±{band:.3f})."
    return f"{text}: {'higher' if delta > 0 else 'lower' if delta < 0 else 'the same'}."


def table_legend(columns: Sequence[str], verdict: bool = False) -> list[str]:
    """What the table's less obvious columns mean, printed under it (`verdict`: the run has one)."""
    lines = []
    if any(c.startswith("eval/all/") for c in columns):
        lines.append("eval/all: the in-loop evaluation (a fixed subset of the held-out problems): a "
                     "progress signal" + ("; the verdict below, on all of them, is the answer."
                                          if verdict else "."))
    if any(c.startswith("goalposts/floor") for c in columns):
        lines.append("floor: goalposts the start model itself is expected to solve in a fresh draw "
                     "of k samples (floor_union: over all the run's checks), the chance level that "
                     "solved (solved_union) must beat to show learning.")
    return lines


def describe_run(history: Sequence[dict], *, samples_per_eval: int | None = None,
                 method: str | None = None, verdict: Sequence[str] = (),
                 in_loop: str | None = None) -> list[str]:
    """Sentences on how the run went against its start (step 0). With `verdict` (one line per k:
    the whole held-out set at the start and the end, paired), the verdict is the only judgement
    of held-out pass@k: the in-loop evaluation (`in_loop` says what it is, e.g. "60 problems x 8
    samples, each iteration") is given as numbers, so no two lines can disagree. Without one, the
    in-loop figures are judged (a 2-standard-error band when `samples_per_eval` = problems x
    samples is known). Then the goalposts against the start model's floor, and where docs/results.md
    reports what such runs do."""
    evals = [h for h in history if "eval/all/pass@1" in h]
    lines = []
    who = f"{method} run" if method else "run"
    label = f"in-loop held-out evaluation ({in_loop})" if in_loop else "in-loop held-out evaluation"
    if len(evals) < 2 or evals[0]["step"] != 0:
        lines.append(f"How the {who} went: fewer than two held-out evaluations (start and end), "
                     "nothing to compare.")
    else:
        first, last = evals[0], evals[-1]
        lines.append(f"How the {who} went against its start checkpoint ({last['step']} iterations):")
        k = largest_k(history)
        keys = ["eval/all/pass@1"] + ([f"eval/all/pass@{k}"] if k is not None else [])
        keys = [key for key in keys if key in first and key in last]
        if verdict:
            lines.append("  verdict (the whole held-out set, start and end checkpoints, paired; one per k):")
            lines += [f"    {v}" for v in verdict]
            moves = ", ".join(f"{key.rsplit('/', 1)[1]} {first[key]:.3f} -> {last[key]:.3f} "
                              f"({last[key] - first[key]:+.3f})" for key in keys)
            lines.append(f"  {label}, the table's eval/all columns: {moves}; a progress signal "
                         "on fewer problems, not a second verdict.")
        else:
            lines.append("  " + _compare(f"{label}, pass@1", first["eval/all/pass@1"],
                                         last["eval/all/pass@1"], samples_per_eval))
            if len(keys) > 1:
                # pass@k's noise is not binomial in the sample count; give the numbers only.
                lines.append("  " + _compare(f"{label}, pass@{k}", first[keys[1]], last[keys[1]], None))
        best = max(evals, key=lambda h: h["eval/all/pass@1"])
        if best is not last and best["step"] != 0:
            lines.append(f"  best in-loop pass@1: {best['eval/all/pass@1']:.3f} at iteration "
                         f"{best['step']} (the run keeps its last checkpoint).")
    lines += _goalposts(history)
    lines.append(f"  What such runs do on the embedded default, measured over seeds, and why: "
                 f"{LEARNING_STUDY}.")
    return lines


def _goalposts(history: Sequence[dict]) -> list[str]:
    """Goalposts solved at the start, at the end and by any checkpoint, against the floor: what
    the start model itself solves by chance in the same number of samples."""
    gps = [h for h in history if "goalposts/solved" in h]
    if not gps:
        return []
    total = next((int(h["goalposts/total"]) for h in reversed(gps) if "goalposts/total" in h), None)
    of = f" of {total}" if total else ""
    start, end = int(gps[0]["goalposts/solved"]), int(gps[-1]["goalposts/solved"])
    union = int(gps[-1].get("goalposts/solved_union", end))
    lines = [f"  goalposts (tasks the start model never solved in k samples): {start}{of} solved at "
             f"the start, {end}{of} by the last checkpoint, {union}{of} by any checkpoint (union)."]
    floor = next((h for h in reversed(gps) if "goalposts/floor" in h), None)
    if floor is not None:
        f1 = floor["goalposts/floor"]
        fu = floor.get("goalposts/floor_union", f1)
        where = "above" if union > fu else "not above"
        lines.append(f"  floor: the start model itself is expected to solve {f1:.2f} of them in a "
                     f"fresh draw of k samples and {fu:.2f} over all the run's checks, by chance "
                     f"alone; the union's {union} is {where} that floor.")
    return lines
