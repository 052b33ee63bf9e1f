"""How relevant each run's proposals were to its goalposts (toy world; a diagnostic): per arm,
the accepted lemmas and lifts, and of those the faithful share, the true one-step variants of
their parent, the lifts on the path to a goalpost (a true variant of a true lemma), the mean
depth of the faithful ones, and the true-variant share of those the student trained on.

    python lab/proposal_relevance.py RUN_DIR [RUN_DIR ...] [--json OUT]

RUN_DIR is a finished run folder (its state.json holds the lineage). Runs named ARM-sSEED
(`selfplay study` names them so) are grouped by ARM; each value is the mean over the arm's runs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COLUMNS = (("accepted", "{:.1f}"), ("faithful", "{:.2f}"), ("true_variant", "{:.2f}"),
           ("on_path", "{:.2f}"), ("faithful_depth", "{:.2f}"), ("trained", "{:.1f}"),
           ("trained_true_variant", "{:.2f}"))


def run_relevance(run: Path, worlds: dict) -> dict:
    import yaml

    from selfplay_core.toyworld.oracle import task_of
    from selfplay_core.toyworld.relevance import lineage_relevance
    from selfplay_core.toyworld.splits import build_world

    state = run / "state.json"
    if not state.is_file():
        raise SystemExit(f"error: {state} does not exist: pass a run folder of the toy world")
    cfg = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").is_file() else {}
    world = cfg.get("world") or {}
    if world.get("name", "toy") != "toy":
        raise SystemExit(f"error: {run} ran on world {world.get('name')!r}; relevance needs the toy world")
    seed = int(world.get("seed", 0))
    if seed not in worlds:
        worlds[seed] = {p.id: task_of(p) for p in build_world(seed).goalpost_pool.problems}
    lineage = json.loads(state.read_text()).get("lineage") or []
    return lineage_relevance(lineage, worlds[seed])


def arm_of(run: Path) -> str:
    return re.sub(r"-s\d+$", "", run.name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="finished toy-world run folders")
    ap.add_argument("--json", type=Path, default=None, help="also write the per-run values here")
    args = ap.parse_args(argv)
    worlds: dict = {}
    per_run = {str(r): run_relevance(r, worlds) for r in args.runs}
    arms: dict[str, list[dict]] = {}
    for r in args.runs:
        arms.setdefault(arm_of(r), []).append(per_run[str(r)])
    print("| arm | kind | runs | " + " | ".join(c for c, _ in COLUMNS) + " |")
    print("|---|---|---|" + "---|" * len(COLUMNS))
    for arm, rows in arms.items():
        for kind in sorted({k for row in rows for k in row}):
            got = [row[kind] for row in rows if kind in row]
            cells = []
            for col, fmt in COLUMNS:
                vals = [g[col] for g in got if g.get(col) is not None]
                cells.append(fmt.format(sum(vals) / len(vals)) if vals else "-")
            print(f"| {arm} | {kind} | {len(got)} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(per_run, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
