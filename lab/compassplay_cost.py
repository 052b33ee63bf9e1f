"""What CompassPlay's reward costs per proposal, side by side with what the loop spends on the
same task anyway (sampling n answers and verifying them), for gradient subsets of the last 1,
2 and all transformer blocks of the toy model.

    python lab/compassplay_cost.py [--tasks 16] [--n 8] [--repeats 3]

Prints, per subset, the parameters it covers and the gradient's time per task as a ratio of the
solve-and-verify time per task measured in the same run (absolute times are noisy on a shared
machine; the ratio is the number to quote), and the cosine with the full-model gradient's
direction (how much of the full signal the cheap subset keeps: the reward is a cosine, so what
matters is whether the subset ranks tasks like the full gradient does — the Spearman rank
correlation of the per-task cosines is printed too).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=24)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import torch

    from selfplay_core.engines.base import SamplingParams
    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.methods.compassplay import cosine, dr_grpo_weights, last_layer_params, spearman
    from selfplay_core.rl.config import LearnerConfig
    from selfplay_core.rl.learner import Learner
    from selfplay_core.rl.rollout import Rollout
    from selfplay_core.sandbox import Executor, SandboxConfig
    from selfplay_core.solve import solve
    from selfplay_core.toyworld.bootstrap import ASSET_DIR
    from selfplay_core.toyworld.splits import build_world

    torch.set_num_threads(1)
    engine = HFEngine(str(ASSET_DIR))
    learner = Learner(engine.model, LearnerConfig(lr=1e-4, micro_batch_size=32),
                      pad_token_id=engine.pad_id)
    tasks = random.Random(0).sample(build_world(0).train.problems, args.tasks)
    sp = SamplingParams(temperature=1.0, max_new_tokens=96, seed=0)
    with Executor(SandboxConfig(workers=2)) as ex:
        t0 = time.perf_counter()
        for _ in range(args.repeats):
            res = solve(engine, ex, tasks, args.n, sp)
        solve_s = (time.perf_counter() - t0) / (args.repeats * len(tasks))

    def rollouts(r):
        w = dr_grpo_weights(list(r.passed), [len(c.token_ids) for c in r.completions])
        return [Rollout(list(c.prompt_token_ids), list(c.token_ids), list(c.logprobs), a,
                        temperature=1.0) for c, a in zip(r.completions, w) if c.token_ids]

    model = learner.unwrapped
    layers = model.config.num_hidden_layers
    total = sum(p.numel() for p in model.parameters())
    subsets = {f"last {k}": last_layer_params(model, k) for k in (1, 2)}
    subsets["all"] = [p for p in model.parameters()]
    # Only eligible tasks (0 < p < 1) are scored, as in the method; the others' gradient is 0.
    rolls = [rollouts(r) for r in res if 0 < r.c < r.n]
    if len(rolls) < 3:
        sys.exit(f"only {len(rolls)} of {len(res)} tasks have 0 < p < 1: use more --tasks")
    ref = rolls[0]  # a fixed direction to score the others against: the first eligible task's
    grads, times = {}, {}
    for name, params in subsets.items():
        t0 = time.perf_counter()
        for _ in range(args.repeats):
            gs = [learner.policy_gradient(rs, params) for rs in rolls]
        times[name] = (time.perf_counter() - t0) / (args.repeats * len(rolls))
        g_ref = learner.policy_gradient(ref, params)
        grads[name] = [cosine(g, g_ref) for g in gs[1:]]
    print(f"toy model: {layers} blocks, {total} parameters; {args.tasks} tasks x n={args.n}, "
          f"{len(rolls)} eligible (timed), cosines of {len(rolls) - 1} against the first")
    print(f"solve-and-verify per task: 1.00 (reference, {solve_s * 1000:.0f} ms here)")
    for name, params in subsets.items():
        share = sum(p.numel() for p in params) / total
        rho = spearman(grads[name], grads["all"])
        print(f"gradient over {name:7s}: {share:6.1%} of parameters, time per task "
              f"{times[name] / solve_s:5.2f} x solve-and-verify, rank correlation of cosines with "
              f"the full gradient's {rho:+.2f}")


if __name__ == "__main__":
    main()
