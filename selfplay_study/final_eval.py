"""The study's final evaluation of one checkpoint: goalpost hits at large k on the fixed
goalpost set, and held-out pass@k by depth on the whole evaluation split.

The raw counts (problem id -> [n, c]) are kept, so any summary — and the paired verdict — can be
recomputed from the saved JSON without sampling again.
"""

from __future__ import annotations

import time
from pathlib import Path

from selfplay_core.engines.base import SamplingParams
from selfplay_core.evaluation.passk import mean_pass_at_k
from selfplay_core.solve import solve
from selfplay_study.protocol import FinalEval


def evaluate_checkpoint(model_dir: str | Path, goalposts, heldout, executor, settings: FinalEval,
                        seed: int, batch_size: int = 128) -> dict:
    """Counts and depths for `goalposts` (goalpost_k samples each) and `heldout` (heldout_n)."""
    from selfplay_core.engines.hf import HFEngine

    t0 = time.perf_counter()
    engine = HFEngine(str(model_dir), batch_size=batch_size)
    sp = lambda s: SamplingParams(temperature=settings.temperature,  # noqa: E731
                                  max_new_tokens=settings.max_new_tokens, seed=s)
    g = solve(engine, executor, list(goalposts), settings.goalpost_k, sp(seed))
    h = solve(engine, executor, list(heldout), settings.heldout_n, sp(seed + 1))
    return {
        "model": str(model_dir), "seed": seed,
        "goalposts": {r.problem.id: [r.n, r.c] for r in g},
        "heldout": {r.problem.id: [r.n, r.c] for r in h},
        "depth": {r.problem.id: r.problem.metadata.get("depth") for r in h},
        "seconds": round(time.perf_counter() - t0, 1),
    }


def summarize(result: dict, ks=(1, 8)) -> dict:
    """Goalpost hits (any pass) and mean pass rate; held-out pass@k overall and by depth."""
    gp = list(result["goalposts"].values())
    out = {"goalposts/hits": sum(c > 0 for _, c in gp), "goalposts/total": len(gp),
           "goalposts/pass_rate": sum(c for _, c in gp) / max(1, sum(n for n, _ in gp))}
    counts = [tuple(v) for v in result["heldout"].values()]
    by_depth: dict = {}
    for pid, v in result["heldout"].items():
        by_depth.setdefault(result["depth"].get(pid), []).append(tuple(v))
    for k in ks:
        out[f"heldout/pass@{k}"] = mean_pass_at_k(counts, k)
        for d, cs in sorted(by_depth.items(), key=lambda kv: (kv[0] is None, kv[0])):
            out[f"heldout/d{d}/pass@{k}"] = mean_pass_at_k(cs, k)
    return out
