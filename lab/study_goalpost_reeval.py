"""Re-evaluate a finished study's checkpoints on another goalpost set.

Every saved evaluation of a study folder (the start checkpoint's samplings and each run's last
checkpoint) is sampled again on the tasks of a goalpost file, k samples each, with the sampling
seed of its own final evaluation; hits (tasks with a pass) and pass rate are read as the study
reads them (mean ± sd over seeds, "separated" beyond two standard errors of the difference).

Why: a checkpoint that solves most of its pool leaves few frontier goalposts (5 on the
solution-first deep checkpoint), too few to separate arms; the mining's reserve (unsolved, no
one-step lemma in band) is the rest of what the start model cannot do.

    python lab/study_goalpost_reeval.py runs/study-sf \\
        --goalposts ~/.cache/selfplay/goalposts/<key>.json --reserve --k 64

Results go to STUDY/reeval-<name>.json (kept per checkpoint: an interrupted run continues) and
the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from selfplay_study.report import mean_sd, separated  # noqa: E402


class ReevalError(ValueError):
    """A goalpost file or study folder this script cannot use."""


def goalpost_ids(data, reserve: bool) -> list[str]:
    """The ids of a goalpost file: a JSON list of ids, or a mining record ({"ids": [...],
    "reserve": [...]}), with its reserve appended when `reserve`."""
    if isinstance(data, list):
        if reserve:
            raise ReevalError("--reserve needs a mining record ({'ids': ..., 'reserve': ...}), "
                              "got a plain list of ids")
        ids = data
    elif isinstance(data, dict) and isinstance(data.get("ids"), list):
        ids = list(data["ids"]) + (list(data.get("reserve", [])) if reserve else [])
    else:
        raise ReevalError("a goalpost file is a JSON list of ids or a mining record with 'ids'")
    seen: list[str] = []
    for i in ids:
        if not isinstance(i, str):
            raise ReevalError(f"goalpost ids are strings, got {i!r}")
        if i not in seen:
            seen.append(i)
    return seen


def table(results: dict[str, list[dict]], n_tasks: int, against: list[str]) -> str:
    """Markdown: per arm, hits and pass rate (mean ± sd over its rows), tasks hit by any row,
    and +1 / 0 / -1 (`separated`) of its hits against each arm in `against`."""
    hits = {a: [r["hits"] for r in rows] for a, rows in results.items()}
    head = ["arm", "runs", f"hits@k (of {n_tasks})", "pass rate", "hit by any"] + [f"vs {a}" for a in against]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    word = {1: "above", 0: "not separated", -1: "below", None: "-"}
    for arm, rows in results.items():
        (m, sd), (pm, psd) = mean_sd(hits[arm]), mean_sd([r["pass_rate"] for r in rows])
        union = set().union(*(set(r["hit_ids"]) for r in rows)) if rows else set()
        cells = [arm, str(len(rows)), f"{m:.1f} ± {sd:.1f}", f"{pm:.4f} ± {psd:.4f}", f"{len(union)}/{n_tasks}"]
        cells += ["-" if a == arm or a not in hits else word[separated(hits[arm], hits[a])] for a in against]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def summary(counts: dict[str, list[int]]) -> dict:
    n = sum(v[0] for v in counts.values())
    return {"hits": sum(c > 0 for _, c in counts.values()),
            "pass_rate": sum(c for _, c in counts.values()) / max(1, n),
            "hit_ids": sorted(g for g, (_, c) in counts.items() if c > 0), "counts": counts}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("study", type=Path, help="a study folder (protocol.json, evals/, runs/)")
    ap.add_argument("--goalposts", type=Path, required=True,
                    help="a JSON list of goalpost ids or a mining record (the goalpost cache)")
    ap.add_argument("--reserve", action="store_true", help="add the mining record's reserve")
    ap.add_argument("--k", type=int, default=64, help="samples per task")
    ap.add_argument("--name", default=None, help="results file STUDY/reeval-NAME.json "
                    "(default: the goalpost file's stem, +reserve)")
    ap.add_argument("--against", default="base,rlvr", help="arms every arm's hits are compared with")
    args = ap.parse_args(argv)
    try:
        return run(args)
    except ReevalError as e:
        print(f"study_goalpost_reeval: {e}", file=sys.stderr)
        return 2


def run(args) -> int:
    from selfplay_study.protocol import Protocol
    from selfplay_study.runner import load_results

    if args.k < 1:
        raise ReevalError(f"--k must be >= 1, got {args.k}")
    pfile = args.study / "protocol.json"
    if not pfile.exists():
        raise ReevalError(f"{pfile}: not found; pass the folder of a `selfplay study`")
    try:
        ids = goalpost_ids(json.loads(args.goalposts.read_text()), args.reserve)
    except (OSError, json.JSONDecodeError) as e:
        raise ReevalError(f"{args.goalposts}: cannot read a JSON goalpost file ({e})") from None
    protocol = Protocol.model_validate(json.loads(pfile.read_text())["protocol"])
    evals = {a: rows for a, rows in load_results(protocol, args.study).items() if rows}
    configs = sorted(args.study.glob("runs/*/config.yaml"))
    if not evals or not configs:
        raise ReevalError(f"{args.study}: no saved evaluations or run configs yet")

    import torch

    from selfplay_core.config import load_config
    from selfplay_core.engines.base import SamplingParams
    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.loop.worlds import build_world
    from selfplay_core.sandbox import Executor, SandboxConfig
    from selfplay_core.solve import solve

    cfg = load_config(configs[0])
    if cfg.model.torch_threads:
        torch.set_num_threads(cfg.model.torch_threads)
    name = args.name or (args.goalposts.stem[:40] + ("+reserve" if args.reserve else ""))
    out = args.study / f"reeval-{name}.json"
    saved = json.loads(out.read_text()) if out.exists() else {"ids": ids, "k": args.k, "rows": {}}
    if saved["ids"] != ids or saved["k"] != args.k:
        raise ReevalError(f"{out} holds another goalpost set or k; pass another --name")
    f = protocol.final
    with Executor(SandboxConfig(workers=2)) as ex:
        world = build_world(cfg, executor=ex)
        pool = {p.id: p for p in world.goalpost_pool}
        missing = [i for i in ids if i not in pool]
        if missing:
            raise ReevalError(f"{len(missing)} of {len(ids)} ids are not in this study's goalpost pool "
                              f"(e.g. {missing[0]!r})")
        tasks = [pool[i] for i in ids]
        for arm, rows in evals.items():
            for row in rows:
                key = f"{arm}-s{row['seed']}"
                if key in saved["rows"]:
                    continue
                t0 = time.perf_counter()
                engine = HFEngine(row["checkpoint"], batch_size=128)
                sp = SamplingParams(temperature=f.temperature, max_new_tokens=f.max_new_tokens,
                                    seed=row["eval"]["seed"])
                res = solve(engine, ex, tasks, args.k, sp)
                saved["rows"][key] = {"arm": arm, "seed": row["seed"],
                                      **summary({r.problem.id: [r.n, r.c] for r in res})}
                out.write_text(json.dumps(saved))
                s = saved["rows"][key]
                print(f"[{key}] hits {s['hits']}/{len(ids)}, pass rate {s['pass_rate']:.4f} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    results: dict[str, list[dict]] = {}
    for r in saved["rows"].values():
        results.setdefault(r["arm"], []).append(r)
    order = [a.name for a in protocol.arms if a.name in results]
    print(table({a: results[a] for a in order}, len(ids), [a for a in args.against.split(",") if a]))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
