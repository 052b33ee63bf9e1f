"""Re-evaluate the end checkpoints of finished toy-world runs against their start checkpoint,
all with the HF engine at one sampling seed (common random numbers), and print each run's
paired verdict — the measurement `make run` prints, made again more precisely and the same way
for every run, whatever engine trained it.

    python lab/verdict_reeval.py RUN_DIR [RUN_DIR ...] [--n 16] [--seed 1000]
        [--start DIR] [--problems N] [--json OUT]

RUN_DIR is a run folder (`runs/gasp-s0`, or a `--set out_dir=...` folder holding one): its
newest `checkpoints/iter-*` is the end checkpoint. The start checkpoint defaults to the
committed toy model. Every checkpoint is sampled on the whole held-out split, `--n` samples per
task at temperature 1.0 with the same seed, so an unchanged policy scores the same and the
paired difference measures the change of the policy, not the draw. Sampling noise within a
problem is still in the per-problem differences, so the standard errors hold.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def end_checkpoint(run: Path) -> Path:
    """The newest checkpoint under a run folder (or under the one run folder inside it)."""
    found = sorted(run.glob("checkpoints/iter-*")) or sorted(run.glob("*/checkpoints/iter-*"))
    if not found:
        raise SystemExit(f"error: no checkpoints/iter-* under {run}: pass a finished run's folder")
    return found[-1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="finished run folders")
    ap.add_argument("--n", type=int, default=16, help="samples per held-out task (default 16)")
    ap.add_argument("--seed", type=int, default=1000, help="the one sampling seed (default 1000)")
    ap.add_argument("--start", type=Path, default=None, help="start checkpoint (default: the toy model)")
    ap.add_argument("--problems", type=int, default=None, help="only the first N held-out tasks")
    ap.add_argument("--json", type=Path, default=None, help="write the per-problem counts here")
    args = ap.parse_args(argv)
    ends = {str(r): end_checkpoint(r) for r in args.runs}     # every path checked before sampling
    if args.n < 8:
        raise SystemExit("error: --n must be at least 8 (the verdicts are on pass@1 and pass@8)")

    import torch

    from selfplay_core.sandbox import Executor, SandboxConfig
    from selfplay_core.stages import verdicts
    from selfplay_study.final_eval import evaluate_checkpoint
    from selfplay_study.protocol import FinalEval
    from selfplay_core.toyworld.bootstrap import ASSET_DIR
    from selfplay_core.toyworld.splits import build_world

    torch.set_num_threads(1)
    start = args.start or Path(ASSET_DIR)
    heldout = list(build_world(0).eval.problems)[:args.problems]
    settings = FinalEval(heldout_n=args.n)
    counts: dict[str, dict] = {}
    with Executor(SandboxConfig(workers=2)) as ex:
        for name, path in [("start", start), *ends.items()]:
            r = evaluate_checkpoint(path, [], heldout, ex, settings, seed=args.seed)
            counts[name] = {p: tuple(v) for p, v in r["heldout"].items()}
            print(f"evaluated {name} ({path}, {r['seconds']} s)", file=sys.stderr, flush=True)
    print(f"{len(heldout)} held-out tasks x {args.n} samples, seed {args.seed}, HF engine; "
          f"start {start}")
    print(f"| run | pass@1 start -> end | pass@8 start -> end (diff ± s.e.) | verdict on pass@8 |")
    print("|---|---|---|---|")
    for name in ends:
        v1, v8 = verdicts(counts["start"], counts[name], (1, 8))
        print(f"| {name} | {v1.start:.3f} -> {v1.end:.3f} | {v8.start:.3f} -> {v8.end:.3f} "
              f"({v8.diff:+.3f} ± {v8.se:.3f}) | {v8.word} |")
    if args.json:
        args.json.write_text(json.dumps({k: {p: list(v) for p, v in c.items()} for k, c in counts.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
