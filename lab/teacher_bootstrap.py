"""Teacher bootstrap experiment (issue 17, acceptance 3): does more training on teacher variant
pairs make the tiny model's teacher faithful?

Continues training a toy checkpoint (default: the committed one) exactly as the bootstrap's
teacher phase does (`BootstrapConfig.teacher_steps`; corpus seed = the bootstrap seed + 1): a
fresh corpus from the same generator with a larger share of teacher pairs (the student and Guide
examples stay in the mix so those roles are not forgotten), and every `--every` steps measures at the loop's teacher
temperature, on held-out sources, the share of proposals that are faithful and true one-step
variants (lemma d3->2, lemma d4->3, lift d2->3; `toyworld.role_quality`), plus the student's
held-out pass@1 / pass@8. The toy oracle only measures here; nothing of it enters training.
Prints one table row per check and saves the last weights as a checkpoint folder a run can start
from (`--set model.path=DIR`). Run by hand; numbers are quoted in notes, not asserted:

    PYTHONPATH=. python lab/teacher_bootstrap.py --steps 1500 --every 500 --out /tmp/tb
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

DEFAULT_START = Path(__file__).resolve().parents[1] / "selfplay_core" / "toyworld" / "assets" / "tiny-s0"


def corpus_settings(teacher_share: float, guide_share: float, n_examples: int, deep: bool = False,
                    depth5_sources: bool = False, depth6_sources: bool = False):
    from selfplay_core.toyworld.corpus import teacher_phase_settings

    try:
        return teacher_phase_settings(teacher_share, guide_share, n_examples, deep=deep,
                                      depth5_sources=depth5_sources, depth6_sources=depth6_sources)
    except ValueError as e:
        raise SystemExit(f"error: --teacher-share / --guide-share: {e}") from None


def measure(model, tokenizer, ex, world, args) -> dict:
    """Teacher fidelity by kind of prompt and student pass@k on held-out tasks."""
    from selfplay_core.engines.base import SamplingParams
    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.solve import solve
    from selfplay_core.toyworld.diagnostics import pass_by_depth
    from selfplay_core.toyworld.metrics import mean_pass_at_k
    from selfplay_core.toyworld.role_quality import edit_description_quality, teacher_quality

    model.eval()
    engine = HFEngine(model, tokenizer, batch_size=64)
    rng = random.Random("teacher-bootstrap:sources")
    d3 = [p for p in world.goalpost_pool.tasks if p.depth == 3]
    d4 = [p for p in world.goalpost_pool.tasks if p.depth == 4]
    d2 = [t for t in world.eval.tasks if t.depth == 2]
    n = args.prompts
    row: dict = {}
    kinds = [("lemma d3->2", rng.sample(d3, min(n, len(d3))), "easier"),
             ("lemma d4->3", rng.sample(d4, min(n, len(d4))), "easier"),
             ("lift d2->3", rng.sample(d2, min(n, len(d2))), "harder")]
    if args.deep_pool:
        dd = args.deep_depth
        deepest = [p for p in world.goalpost_pool.tasks if p.depth == dd]
        kinds += [(f"lemma d{dd}->{dd - 1}", rng.sample(deepest, min(n, len(deepest))), "easier"),
                  ("lift d4->5", rng.sample(d4, min(n, len(d4))), "harder")]
    for kind, sources, direction in kinds:
        q, _ = teacher_quality(engine, ex, sources, direction, kind, args.teacher_temperature, seed=5,
                               max_new_tokens=args.teacher_tokens)
        row[kind] = q.shares()
    # GASP's executor-edited lemma on the pool's deepest goalposts: the question for a forced
    # statement deletion of the goalpost's program (method gasp-edit).
    depth = args.deep_depth if args.deep_pool else 4
    deep = [p for p in world.goalpost_pool.tasks if p.depth == depth]
    q = edit_description_quality(engine, ex, rng.sample(deep, min(n, len(deep))),
                                 args.teacher_temperature, seed=5, max_new_tokens=args.teacher_tokens)
    row[f"describe edit d{depth}"] = q.shares()
    problems = list(world.eval.problems)[:args.heldout]
    res = solve(engine, ex, problems, 8, SamplingParams(temperature=1.0, max_new_tokens=96, seed=11))
    row["heldout"] = {k: mean_pass_at_k([(r.n, r.c) for r in res if r.n], k) for k in (1, 8)}
    row["by_depth"] = pass_by_depth(res)
    model.train()
    return row


def line(step: int, loss: float, row: dict) -> str:
    kinds = [k for k in row if k.startswith(("lemma", "lift", "describe"))]
    f = " | ".join(f"{row[k]['faithful']:.0%} / {row[k]['true_variant']:.0%}" for k in kinds)
    h = row["heldout"]
    return f"| {step} | {loss:.3f} | {f} | {h[1]:.3f} / {h[8]:.3f} |"


def _program_first(text: str) -> bool:
    """A teacher example whose completion writes the program before the question."""
    from selfplay_core.roles.teacher import SOLUTION_HEADER, TASK_HEADER, VARIANT_HEADER

    if VARIANT_HEADER not in text:
        return False
    completion = text.split(VARIANT_HEADER, 1)[1]
    sol, task = completion.find(SOLUTION_HEADER), completion.find(TASK_HEADER)
    return sol != -1 and (task == -1 or sol < task)


def _describes_an_edit(text: str) -> bool:
    """A teacher example written program first whose program is a statement deletion of its
    source's: the form GASP's edited-lemma round forces (solution-first true variants that drop
    a step can be one too)."""
    from selfplay_core.program_edits import statement_deletions
    from selfplay_core.roles.teacher import SOLUTION_HEADER, TASK_HEADER, VARIANT_HEADER

    if not _program_first(text):
        return False
    prompt, completion = text.split(VARIANT_HEADER, 1)
    source = prompt.split(SOLUTION_HEADER + "\n", 1)[1]
    program = completion.split(SOLUTION_HEADER + "\n", 1)[1].split(TASK_HEADER, 1)[0]
    return program in statement_deletions(source)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--start", type=Path, default=None, help="checkpoint to continue (default: the committed toy model)")
    ap.add_argument("--out", type=Path, required=True, help="folder for the trained checkpoint and results.json")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--every", type=int, default=500, help="measure every this many steps")
    ap.add_argument("--teacher-share", type=float, default=0.6)
    ap.add_argument("--guide-share", type=float, default=0.09)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1, help="corpus seed (the bootstrap used 0)")
    ap.add_argument("--prompts", type=int, default=60, help="teacher prompts per kind at each check")
    ap.add_argument("--heldout", type=int, default=150,
                    help="the first N held-out tasks (x 8 samples) at each check; the split is "
                    "ordered by depth (80 of depth 1, 100 of depth 2, 60 of 3, 60 of 4; 300 = all)")
    ap.add_argument("--teacher-temperature", type=float, default=0.4)
    ap.add_argument("--deep-pool", type=int, default=0,
                    help="N depth-5 pool candidates (world.deep_pool): kept out of the corpus, "
                         "depth-4 sources made harder too, lemma d5->4 and lift d4->5 measured")
    ap.add_argument("--deep-depth", type=int, choices=(5, 6), default=5,
                    help="depth of the deep pool's candidates (world.deep_depth; 6 with "
                         "--depth6-sources --completion-only: a teacher that is not also the student)")
    ap.add_argument("--depth6-sources", action="store_true",
                    help="with --deep-depth 6: depth-5 and depth-6 tasks (outside the pool) as lemma "
                         "sources too")
    ap.add_argument("--completion-only", action="store_true",
                    help="teacher examples train on their completion only: the source question and "
                         "program in the prompt are context, not targets, so the phase does not train "
                         "writing the source's program from its question (the student's task)")
    ap.add_argument("--depth5-sources", action="store_true",
                    help="with --deep-pool: depth-5 tasks (outside the pool) as lemma sources too")
    ap.add_argument("--solution-first", action="store_true",
                    help="teacher pairs write the program first, then the question that describes "
                         "it (CorpusSettings.teacher_solution_first): a teacher that can describe a "
                         "given program, e.g. an edit of the goalpost's")
    ap.add_argument("--edit-share", type=float, default=0.0,
                    help="share of the teacher examples that describe an executor's statement "
                         "deletion of their source, written as GASP's edited-lemma round forces it "
                         "(CorpusSettings.teacher_edit_share; the rest stay variant pairs)")
    ap.add_argument("--teacher-tokens", type=int, default=192,
                    help="the teacher's generation budget at the checks (engine.max_new_tokens_teacher)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.every < 1:
        raise SystemExit("error: --steps and --every must be >= 1")
    if args.deep_pool < 0:
        raise SystemExit("error: --deep-pool must be >= 0")
    if (args.depth5_sources or args.depth6_sources) and not args.deep_pool:
        raise SystemExit("error: --depth5-sources / --depth6-sources need --deep-pool N (N > 0): the "
                         "deep pool's candidates must be kept out of the corpus and are what it measures")
    if args.depth6_sources and args.deep_depth != 6:
        raise SystemExit("error: --depth6-sources needs --deep-depth 6: depth-6 sources are measured "
                         "on the depth-6 pool, which must be kept out of the corpus")
    if args.deep_depth != 5 and not args.deep_pool:
        raise SystemExit("error: --deep-depth needs --deep-pool N (N > 0)")
    settings = corpus_settings(args.teacher_share, args.guide_share, args.steps * args.batch_size,
                               deep=args.deep_pool > 0, depth5_sources=args.depth5_sources,
                               depth6_sources=args.depth6_sources)
    if not 0 <= args.edit_share <= 1:
        raise SystemExit(f"error: --edit-share must be in [0, 1], got {args.edit_share}")
    if args.solution_first:
        settings = dataclasses.replace(settings, teacher_solution_first=True)
    if args.edit_share:
        settings = dataclasses.replace(settings, teacher_edit_share=args.edit_share)
    start = args.start or DEFAULT_START
    if not (Path(start) / "config.json").is_file() or not (Path(start) / "bootstrap.json").is_file():
        raise SystemExit(f"error: --start {start} is not a toy checkpoint folder (config.json and "
                         "bootstrap.json): give a folder `selfplay bootstrap` or this script wrote")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfplay_core.sandbox import Executor, SandboxConfig
    from selfplay_core.toyworld.bootstrap import corpus_hash, library_versions
    from selfplay_core.toyworld.corpus import build_corpus, completion_start
    from selfplay_core.toyworld.pretrain import TrainSettings, encode_with_starts, pretrain
    from selfplay_core.toyworld.splits import SplitSizes, build_world

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(start)
    world = build_world(0, SplitSizes(deep_pool=args.deep_pool, deep_depth=args.deep_depth))
    t0 = time.time()
    texts = build_corpus(settings, args.seed, world.exclusion())
    if args.completion_only:
        ids, loss_from = encode_with_starts(tokenizer, texts, [completion_start(t) for t in texts])
    else:
        ids, loss_from = tokenizer(texts, add_special_tokens=False)["input_ids"], None
    long = sum(len(i) > 384 for i in ids)
    program_first = sum(_program_first(t) for t in texts)
    edits = sum(_describes_an_edit(t) for t in texts)
    print(f"corpus: {len(texts)} examples, teacher share {args.teacher_share}, "
          f"{program_first} teacher pairs written program first, "
          f"{edits} of them a statement deletion of their source, "
          f"{sum(x > 0 for x in loss_from) if loss_from else 0} teacher examples trained on their completion only, "
          f"{long} over 384 tokens (cut), {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    dd = args.deep_depth
    deep = f" | lemma d{dd}->{dd - 1} | lift d4->5" if args.deep_pool else ""
    edit = f" | describe edit d{dd if args.deep_pool else 4}"
    print(f"| step | train loss (last 20) | lemma d3->2 faithful / true | lemma d4->3 | lift d2->3{deep}{edit} "
          "| held-out pass@1 / pass@8 |")
    print("|---|---|---|---|---|" + "---|" * (3 if args.deep_pool else 1) + "---|")
    with Executor(SandboxConfig(workers=2)) as ex:
        first = measure(model, tokenizer, ex, world, args)
        rows.append({"step": 0, **first})
        print(line(0, float("nan"), first), flush=True)
        losses: list[float] = []

        def progress(step, total, loss):
            losses.append(loss)
            if step % args.every == 0 or step == total:
                r = measure(model, tokenizer, ex, world, args)
                recent = sum(losses[-20:]) / len(losses[-20:])
                rows.append({"step": step, "loss": recent, "seconds": round(time.time() - t0), **r})
                print(line(step, recent, r), flush=True)
                (args.out / "results.json").write_text(json.dumps(rows, indent=2, default=str) + "\n")

        train = TrainSettings(epochs=1.0, batch_size=args.batch_size, lr=args.lr)
        pretrain(model, ids, train, args.seed, tokenizer.pad_token_id, progress=progress,
                 loss_from=loss_from)
    model.save_pretrained(args.out / "model")
    tokenizer.save_pretrained(args.out / "model")
    meta = json.loads((Path(start) / "bootstrap.json").read_text())
    # Each continuation is kept, not only the last (a checkpoint continued twice used to lose the
    # first's record), with what a rebuild needs to tell why it differs: the corpus it trained
    # on and the environment (a rebuild on a new machine and venv, same corpus, has differed).
    entry = {**{k: v for k, v in vars(args).items() if k not in ("out", "start")},
             "from": str(start), "steps_done": rows[-1]["step"], "corpus_sha256": corpus_hash(texts),
             "versions": library_versions()}
    lineage = meta.get("lineage") or ([meta["continued"]] if "continued" in meta else [])
    meta["continued"], meta["lineage"] = entry, [*lineage, entry]
    (args.out / "model" / "bootstrap.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    print(f"saved {args.out / 'model'} ({time.time() - t0:.0f} s in all)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
