"""Both roles of one checkpoint on its frontier goalposts, against other tasks of the pool (toy
world; the oracle grades, a diagnostic): as teacher, the share of lemma proposals that are
faithful and true one-step variants, and their line similarity to the goalpost's program; as
student, how its failed programs differ from the reference, in line edits. With several
proposals per source, also per source: does any of them hit a true one-step lemma, and is the one
nearest the source's program (line similarity, below 1.0) a true lemma — whether a reward or gate
that selects among the teacher's own proposals has anything to select. And the teacher's
other task in GASP's executor-edited lemma round: describing a program it is given (one
statement of the source's program deleted by the executor).

    python lab/goalpost_roles.py MODEL_DIR GOALPOSTS_JSON [--deep-pool 240] [--deep-depth 5]
        [--proposals 3] [--others 111] [--others-proposals 1] [--samples 16]

GOALPOSTS_JSON is a study folder's `goalposts.json` (a list of ids of the toy world's goalpost
pool) or a mined set (a checkpoint's `goalposts.json`, its `ids`); the other tasks are pool tasks
of the deepest depth outside it, drawn with --seed.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def teacher_rows(engine, executor, groups: dict, temperature: float, max_new_tokens: int) -> list[str]:
    from selfplay_core.code_relevance import line_similarity
    from selfplay_core.toyworld.role_quality import source_coverage, teacher_quality

    rows = ["| lemma sources | proposals | valid | faithful | true one-step variant | line similarity to the source (valid) "
            "| sources with a true lemma | sources whose most similar proposal is one |",
            "|---|---|---|---|---|---|---|---|"]
    for name, sources in groups.items():
        q, valid = teacher_quality(engine, executor, sources, "easier", name, temperature,
                                   seed=5, max_new_tokens=max_new_tokens)
        sims = [line_similarity(src.program(), p.code) for src, p, _, _ in valid]
        n_sources = len({src.key for src in sources})
        _, any_true, top_true = source_coverage(
            [(src.key, sim, true) for (src, _, _, true), sim in zip(valid, sims)])
        s = q.shares()
        sim = f"{sum(sims) / len(sims):.2f}" if sims else "-"
        rows.append(f"| {name} | {s['prompts']} | {s['valid']:.2f} | {s['faithful']:.2f} | "
                    f"{s['true_variant']:.3f} | {sim} | {any_true}/{n_sources} | {top_true}/{n_sources} |")
    return rows


def describe_rows(engine, executor, groups: dict, temperature: float, max_new_tokens: int) -> list[str]:
    """GASP's executor-edited lemma (method `gasp-edit`): per source, one
    of its statement deletions that is a toy task, forced as the loop forces it, and the
    teacher's question for it read against that program."""
    from selfplay_core.toyworld.role_quality import edit_description_quality

    rows = ["| edited sources | prompts | valid | faithful to the forced program | describes the deletion exactly |",
            "|---|---|---|---|---|"]
    for name, sources in groups.items():
        s = edit_description_quality(engine, executor, sources, temperature, seed=5,
                                     max_new_tokens=max_new_tokens).shares()
        rows.append(f"| {name} | {s['prompts']} | {s['valid']:.2f} | {s['faithful']:.2f} | "
                    f"{s['true_variant']:.2f} |")
    return rows


def student_rows(engine, executor, problems, tasks, n: int, temperature: float,
                 max_new_tokens: int) -> list[str]:
    from selfplay_core.code_relevance import EDIT_CLASSES, edit_class
    from selfplay_core.engines.base import SamplingParams
    from selfplay_core.roles.student import parse_student
    from selfplay_core.solve import solve

    res = solve(engine, executor, problems, n, SamplingParams(temperature=temperature, seed=11,
                                                               max_new_tokens=max_new_tokens))
    count = collections.Counter()
    for r, task in zip(res, tasks):
        for comp, ok in zip(r.completions, r.passed):
            if ok:
                count["passed"] += 1
                continue
            ans = parse_student(comp.text, "def f(x):", "f")
            code = getattr(ans, "code", None)
            count[edit_class(task.program(), code) if code else "unparsed"] += 1
    failed = sum(count[c] for c in EDIT_CLASSES)
    rows = [f"student, {n} samples on each of {len(problems)} goalposts at T = {temperature}: "
            f"{count['passed']} pass, {count['unparsed']} unparsed, {failed} failed programs:", "",
            "| failed program vs reference | programs | share |", "|---|---|---|"]
    rows += [f"| {c} | {count[c]} | {count[c] / max(1, failed):.2f} |" for c in EDIT_CLASSES]
    return rows


def load_goalposts(path: Path, deep_pool: int, world_seed: int = 0,
                   deep_depth: int = 5) -> tuple[list[str], dict, dict]:
    """The goalpost ids of a study folder's goalposts.json (a list) or of a mined set (its
    'ids'), with the toy world's goalpost pool as id -> Task and id -> Problem. A file that is
    neither, or ids outside this world's pool, is a ValueError of one line."""
    from selfplay_core.toyworld.splits import SplitSizes, build_world

    try:
        ids = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a goalposts.json ({e})") from None
    if isinstance(ids, dict):   # a mined set (selfplay-goalposts/1): its ids
        ids = ids.get("ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(g, str) for g in ids):
        raise ValueError(f"{path}: expected a list of goalpost ids or a mined set with 'ids'")
    pool = build_world(world_seed, SplitSizes(deep_pool=deep_pool, deep_depth=deep_depth)).goalpost_pool
    tasks = dict(zip([p.id for p in pool.problems], pool.tasks))
    unknown = [g for g in ids if g not in tasks]
    if unknown:
        raise ValueError(f"{path}: {len(unknown)} ids are not in this world's goalpost pool "
                         f"(e.g. {unknown[0]}); check --deep-pool, --deep-depth and --world-seed")
    return ids, tasks, {p.id: p for p in pool.problems}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", type=Path, help="checkpoint folder (HF format)")
    ap.add_argument("goalposts", type=Path, help="a study folder's goalposts.json")
    ap.add_argument("--deep-pool", type=int, default=0, help="the world's world.deep_pool (0: default world)")
    ap.add_argument("--deep-depth", type=int, choices=(5, 6), default=5, help="the world's world.deep_depth")
    ap.add_argument("--world-seed", type=int, default=0)
    ap.add_argument("--teacher-tokens", type=int, default=256,
                    help="the teacher's generation budget (engine.max_new_tokens_teacher; 320 for depth 6)")
    ap.add_argument("--proposals", type=int, default=3, help="lemma proposals per goalpost")
    ap.add_argument("--others", type=int, default=111, help="other pool tasks of the deepest depth")
    ap.add_argument("--others-proposals", type=int, default=1, help="lemma proposals per other task")
    ap.add_argument("--samples", type=int, default=16, help="student samples per goalpost")
    ap.add_argument("--teacher-temperature", type=float, default=0.4)
    ap.add_argument("--student-temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--match-reps", action="store_true",
                    help="other tasks only with an (input, output) representation pair some goalpost "
                         "has: a gap that is not the adapters' lines")
    args = ap.parse_args(argv)
    for flag in ("proposals", "others_proposals", "samples"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if not (args.model / "config.json").is_file():
        ap.error(f"{args.model}: not a checkpoint folder (no config.json)")
    try:
        ids, tasks, problems = load_goalposts(args.goalposts, args.deep_pool, args.world_seed,
                                              args.deep_depth)
    except ValueError as e:
        ap.error(str(e))

    import torch

    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.sandbox import Executor, SandboxConfig

    torch.set_num_threads(1)
    deepest = max(t.depth for t in tasks.values())
    chosen = set(ids)
    others = [t for i, t in tasks.items() if t.depth == deepest and i not in chosen]
    if args.match_reps:
        reps = {(tasks[g].in_rep, tasks[g].out_rep) for g in ids}
        others = [t for t in others if (t.in_rep, t.out_rep) in reps]
    others = random.Random(args.seed).sample(others, min(args.others, len(others)))
    engine = HFEngine(str(args.model), batch_size=64)
    with Executor(SandboxConfig(workers=2)) as ex:
        like = " with a goalpost's representations" if args.match_reps else ""
        groups = {f"its {len(ids)} goalposts x {args.proposals}": [tasks[g] for g in ids for _ in range(args.proposals)],
                  f"{len(others)} other depth-{deepest} pool tasks{like}" + (f" x {args.others_proposals}" if args.others_proposals > 1 else ""):
                      [t for t in others for _ in range(args.others_proposals)]}
        print("\n".join(teacher_rows(engine, ex, groups, args.teacher_temperature, args.teacher_tokens)))
        print()
        print("\n".join(describe_rows(engine, ex, groups, args.teacher_temperature, args.teacher_tokens)))
        print()
        print("\n".join(student_rows(engine, ex, [problems[g] for g in ids], [tasks[g] for g in ids],
                                     args.samples, args.student_temperature, 256)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
