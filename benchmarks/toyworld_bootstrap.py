"""Toy-world bootstrap benchmark: does the tiny model land where the method needs it?

Prints parameters, vocabulary, bootstrap wall time, pass@1 / pass@8 by depth on the held-out
eval split, goalposts mined from the depth-3/4 pool (pass@k = 0), the teacher format's validity,
and a short student-only policy-gradient run (held-out depth-2 pass@1 before/after, with sample
counts). Run by hand; numbers are quoted in notes, not asserted:

    PYTHONPATH=. python benchmarks/toyworld_bootstrap.py [--fresh] [--rl-minutes 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fresh", action="store_true", help="bootstrap again even if cached (timed)")
    ap.add_argument("--model-dir", default=None, help="evaluate this folder instead of bootstrapping")
    ap.add_argument("--samples", type=int, default=8, help="samples per eval task (pass@1, pass@8)")
    ap.add_argument("--goal-k", type=int, default=64)
    ap.add_argument("--teacher-prompts", type=int, default=200)
    ap.add_argument("--rl-minutes", type=float, default=3.0)
    ap.add_argument("--rl-steps", type=int, default=200, help="upper bound; the minutes decide")
    ap.add_argument("--rl-eval-samples", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", default=None, help="also write the numbers here")
    args = ap.parse_args()

    import torch

    from selfplay_core.engines.base import SamplingParams
    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.goalposts import engine_solver, mine_goalposts
    from selfplay_core.sandbox import Executor, SandboxConfig
    from selfplay_core.toyworld.bootstrap import BootstrapConfig, bootstrap_toy_model
    from selfplay_core.solve import solve
    from selfplay_core.toyworld.diagnostics import pass_by_depth, teacher_validity
    from selfplay_core.toyworld.metrics import mean_pass_at_k
    from selfplay_core.toyworld.model import n_parameters
    from selfplay_core.toyworld.pg import PGSettings, policy_gradient
    from selfplay_core.toyworld.splits import build_world

    torch.set_num_threads(args.threads)
    report: dict = {}
    t0 = time.time()
    if args.model_dir:
        model_dir = Path(args.model_dir)
    else:
        model_dir = bootstrap_toy_model(BootstrapConfig(seed=args.seed, threads=args.threads), force=args.fresh)
    meta = json.loads((model_dir / "bootstrap.json").read_text())
    report["bootstrap"] = {"dir": str(model_dir), "wall_s_this_run": round(time.time() - t0, 1),
                           "times": meta["times"], "steps": meta["steps"], "corpus": meta["corpus"]}
    engine = HFEngine(model_dir, batch_size=128)
    report["parameters"] = n_parameters(engine.model)
    report["vocab_size"] = len(engine.tokenizer)
    print(f"model: {model_dir}")
    print(f"parameters: {report['parameters']:,}   vocab: {report['vocab_size']}   "
          f"bootstrap wall time: {meta['times']['total_s']:.0f}s (corpus {meta['times']['corpus_s']:.0f}s, "
          f"train {meta['times']['train_s']:.0f}s, {meta['steps']} steps, "
          f"{meta['corpus']['examples']} examples / {meta['corpus']['tokens']:,} tokens)")

    world = build_world(args.seed)
    sample = SamplingParams(temperature=1.0, max_new_tokens=128, seed=args.seed)
    with Executor(SandboxConfig(workers=args.workers)) as ex:
        # 1. pass@k by depth on the held-out eval split
        t = time.time()
        res = solve(engine, ex, world.eval.problems, args.samples, sample)
        table = pass_by_depth(res, ks=(1, args.samples))
        report["eval"] = {str(d): row for d, row in table.items()}
        print(f"\nheld-out eval split {world.eval.version} {world.eval.content_hash} "
              f"(T=1.0, {args.samples} samples/task, {time.time() - t:.0f}s):")
        print(f"  {'depth':>5} {'tasks':>6} {'samples':>8} {'pass@1':>8} {'pass@' + str(args.samples):>8}")
        for d, row in table.items():
            print(f"  {d:>5} {row['tasks']:>6} {row['samples']:>8} {row['pass@1']:>8.3f} "
                  f"{row[f'pass@{args.samples}']:>8.3f}")

        # 2. goalposts mined from the depth-3/4 pool
        t = time.time()
        mined = mine_goalposts(world.goalpost_pool.problems,
                               [engine_solver(engine, ex, SamplingParams(temperature=1.0, max_new_tokens=128,
                                                                         seed=args.seed + 7))],
                               k=args.goal_k, chunk=16)
        by_d = {}
        for p in mined.goalposts:
            by_d[p.metadata["depth"]] = by_d.get(p.metadata["depth"], 0) + 1
        report["goalposts"] = {**mined.summary(), "by_depth": by_d,
                               "pass@k_on_goalposts": mean_pass_at_k(
                                   [(mined.samples[p.id], mined.passes[p.id]) for p in mined.goalposts],
                                   args.goal_k) if mined.goalposts else None}
        print(f"\ngoalposts: {len(mined.goalposts)} of {mined.candidates} depth-3/4 candidates have "
              f"pass@{args.goal_k} = 0 (by depth {by_d}; {sum(mined.samples.values())} samples, "
              f"{time.time() - t:.0f}s)")

        # 3. teacher format validity
        t = time.time()
        import random

        rng = random.Random(args.seed)
        tasks = rng.sample(world.train.tasks, min(args.teacher_prompts, len(world.train.tasks)))
        ts = teacher_validity(engine, ex, tasks, SamplingParams(temperature=1.0, max_new_tokens=256,
                                                                seed=args.seed + 11), seed=args.seed)
        report["teacher"] = {"prompts": ts.prompts, "parsed": ts.parsed, "valid": ts.valid,
                             "faithful": ts.faithful, "rejections": ts.rejections}
        print(f"\nteacher (T=1.0, {ts.prompts} prompts on train tasks, random axis, easier/harder, "
              f"{time.time() - t:.0f}s): parsed {ts.parsed / ts.prompts:.0%}, valid (runs, deterministic) "
              f"{ts.validity:.0%}, faithful (description matches code) {ts.faithful / ts.prompts:.0%}; "
              f"rejections {ts.rejections}")

        # 4. RL sanity: student-only policy gradient on depth-2 train tasks
        from transformers import AutoModelForCausalLM

        held2 = world.eval.by_depth()[2]
        train2 = world.train.by_depth()[2]
        ev = SamplingParams(temperature=1.0, max_new_tokens=128, seed=args.seed + 99)
        n_ev = args.rl_eval_samples
        before = pass_by_depth(solve(engine, ex, held2, n_ev, ev), ks=(1, 8))[2]
        learner = AutoModelForCausalLM.from_pretrained(model_dir)
        t = time.time()
        pgs = PGSettings(steps=args.rl_steps, time_budget_s=args.rl_minutes * 60, seed=args.seed)
        logs = policy_gradient(learner, engine, ex, train2, pgs)
        rl_s = time.time() - t
        after = pass_by_depth(solve(engine, ex, held2, n_ev, ev), ks=(1, 8))[2]
        d3 = pass_by_depth(solve(engine, ex, world.eval.by_depth()[3], n_ev, ev), ks=(1, 8))[3]
        se = math.sqrt(before["pass@1"] * (1 - before["pass@1"]) / before["samples"]
                       + after["pass@1"] * (1 - after["pass@1"]) / after["samples"])
        first = logs[: max(1, len(logs) // 5)]
        last = logs[-max(1, len(logs) // 5):]
        report["rl"] = {"steps": len(logs), "seconds": round(rl_s), "batch": "16 tasks x 8 samples",
                        "before": before, "after": after, "depth3_after": d3,
                        "train_reward_first": sum(x["reward"] for x in first) / len(first),
                        "train_reward_last": sum(x["reward"] for x in last) / len(last),
                        "signal_share": sum(x["groups_with_signal"] for x in logs) / len(logs)}
        print(f"\nRL sanity: {len(logs)} policy-gradient steps (16 depth-2 train tasks x 8 samples, "
              f"lr {pgs.lr:g}) in {rl_s:.0f}s; train reward {report['rl']['train_reward_first']:.2f} -> "
              f"{report['rl']['train_reward_last']:.2f}; groups with signal {report['rl']['signal_share']:.0%}")
        print(f"  held-out depth-2 pass@1: {before['pass@1']:.3f} -> {after['pass@1']:.3f} "
              f"({before['tasks']} tasks x {n_ev} samples = {before['samples']} samples each; "
              f"difference {after['pass@1'] - before['pass@1']:+.3f}, ~{se:.3f} standard error)")
        print(f"  held-out depth-2 pass@8: {before['pass@8']:.3f} -> {after['pass@8']:.3f};  "
              f"depth-3 pass@1 after: {d3['pass@1']:.3f}")
    report["total_s"] = round(time.time() - t0)
    print(f"\ntotal {report['total_s']}s")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
