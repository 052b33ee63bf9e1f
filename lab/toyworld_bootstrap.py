"""Toy-world bootstrap benchmark: does the tiny model land where the method needs it?

Prints parameters, vocabulary, bootstrap wall time, pass@1 / pass@8 by depth on the held-out
eval split, goalposts mined from the depth-3/4 pool (pass@k = 0), the teacher format's validity,
the teacher's variants by kind of prompt at the loop's teacher temperature (goalpost -> lemma,
lemma -> lift: parsed, valid, faithful, true one-step variants), the Guide's accuracy against
the toy oracle (synthetic proposals and the teacher's own), and a short student-only
policy-gradient run (held-out depth-2 pass@1 before/after, with sample counts). Run by hand;
numbers are quoted in notes, not asserted. Compare two checkpoints by running it on each:

    PYTHONPATH=. python lab/toyworld_bootstrap.py [--fresh] [--rl-minutes 3]
    PYTHONPATH=. python lab/toyworld_bootstrap.py --model-dir DIR --goal-k 0 --rl-minutes 0
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
    ap.add_argument("--goal-k", type=int, default=64, help="0: skip goalpost mining")
    ap.add_argument("--teacher-temperature", type=float, default=0.4, help="the loop's (tiny-cpu.yaml)")
    ap.add_argument("--variant-prompts", type=int, default=120, help="per kind of teacher prompt")
    ap.add_argument("--guide-items", type=int, default=300, help="synthetic Guide items (0: skip)")
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
        if args.goal_k <= 0:
            mined = None
        else:
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

        # 3b. the teacher's variants by kind, at the loop's teacher temperature; the Guide
        role_quality(args, engine, ex, world, report)

        # 4. RL sanity: student-only policy gradient on depth-2 train tasks
        if args.rl_minutes <= 0:
            report["total_s"] = round(time.time() - t0)
            if args.json:
                Path(args.json).write_text(json.dumps(report, indent=2, default=str) + "\n")
            print(f"\ntotal {report['total_s']}s")
            return 0
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


def role_quality(args, engine, ex, world, report) -> None:
    import random

    from selfplay_core.toyworld.corpus import Exclusion, guide_case
    from selfplay_core.toyworld.guide_oracle import judge
    from selfplay_core.toyworld.role_quality import guide_accuracy, guide_items_from_proposals, teacher_quality

    rng = random.Random(f"role-quality:{args.seed}")
    pool = world.goalpost_pool.by_depth()
    d3 = [p for p in world.goalpost_pool.tasks if p.depth == 3]
    d4 = [p for p in world.goalpost_pool.tasks if p.depth == 4]
    d2 = [t for t in world.eval.tasks if t.depth == 2]
    n = args.variant_prompts
    kinds = [("lemma d3->2", rng.sample(d3, min(n, len(d3))), "easier"),
             ("lemma d4->3", rng.sample(d4, min(n, len(d4))), "easier"),
             ("lift d2->3", rng.sample(d2, min(n, len(d2))), "harder")]
    T = args.teacher_temperature
    report["teacher_variants"] = {}
    lemma_props = []
    t = time.time()
    print(f"\nteacher variants at T={T} (one proposal per prompt; held-out sources):")
    print(f"  {'kind':<12} {'prompts':>7} {'parsed':>7} {'valid':>7} {'faithful':>9} {'of valid':>9} "
          f"{'true variant':>13}  depths of faithful")
    for kind, sources, direction in kinds:
        q, props = teacher_quality(engine, ex, sources, direction, kind, T, seed=args.seed + 5)
        if kind.startswith("lemma"):
            lemma_props += props
        sh = q.shares()
        report["teacher_variants"][kind] = sh
        print(f"  {kind:<12} {sh['prompts']:>7} {sh['parsed']:>7.0%} {sh['valid']:>7.0%} {sh['faithful']:>9.0%} "
              f"{sh['faithful_of_valid']:>9.0%} {sh['true_variant']:>13.0%}  {sh['depths']}")
    print(f"  ({time.time() - t:.0f}s)")
    if args.guide_items <= 0:
        return
    t = time.time()
    ex_ = Exclusion()
    targets = [rng.choice(world.goalpost_pool.tasks) for _ in range(args.guide_items)]
    synth = []
    for tg in targets:
        prop, code = guide_case(tg, rng, ex_)
        synth.append((tg, prop.description(), code, judge(tg, prop.description(), code)))
    report["guide"] = {"synthetic": guide_accuracy(engine, synth, seed=args.seed).summary(),
                       "teacher_lemmas": guide_accuracy(engine, guide_items_from_proposals(lemma_props),
                                                        seed=args.seed).summary()}
    print(f"\nGuide (greedy) vs the toy oracle ({time.time() - t:.0f}s):")
    for name, g in report["guide"].items():
        acc = " ".join(f"{k} {v:.0%}" for k, v in g["accuracy"].items())
        print(f"  {name:<15} {g['items']:>4} items, parsed {g['parsed']:.0%}; exact: {acc}; fidelity "
              f"balanced {g.get('fidelity_balanced_accuracy', float('nan')):.0%} (items by truth {g['fidelity_items']})")


if __name__ == "__main__":
    sys.exit(main())
