"""TRL as the reference: real-data RLVR on the toy world, run twice for the same budget, with the
project's learner (the `rlvr` method of the loop) and with TRL's GRPOTrainer (its
`rollout_func` hook generating with the same HF engine, the executor as the reward function).
Prints held-out pass@1 curves of both; a large gap would be a bug to find.

    python benchmarks/trl_reference.py [--iterations 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def ours(iterations: int, out: str) -> list[tuple[int, float]]:
    from selfplay_core.config import load_config
    from selfplay_core.loop.driver import run_selfplay

    cfg = load_config(ROOT / "configs" / "rlvr-tiny-cpu.yaml",
                      [f"iterations={iterations}", f"out_dir={out}", "tracking.run_name=trl-ref-ours",
                       "eval.goalpost_every=1000"])
    res = run_selfplay(cfg, run_dir=Path(out) / "trl-ref-ours")
    return [(h["step"], h["eval/all/pass@1"]) for h in res.history if "eval/all/pass@1" in h]


def trl(iterations: int, out: str) -> list[tuple[int, float]]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from selfplay_core.config import load_config
    from selfplay_core.engines.base import SamplingParams
    from selfplay_core.engines.hf import HFEngine
    from selfplay_core import stages as S
    from selfplay_core.loop.context import resolve_model_dir
    from selfplay_core.records import IterationLog
    from selfplay_core.problems import Sample
    from selfplay_core.roles.student import STOP, parse_student
    from selfplay_core.sandbox import Executor
    from selfplay_core.solve import student_prompt_for
    from selfplay_core.toyworld.splits import build_world

    cfg = load_config(ROOT / "configs" / "rlvr-tiny-cpu.yaml", [f"iterations={iterations}"])
    torch.set_num_threads(cfg.model.torch_threads or 1)
    torch.manual_seed(cfg.seed)
    model_dir = resolve_model_dir(cfg)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    world = build_world(cfg.world.seed)
    import random
    train = list(world.train.problems)
    random.Random(f"real-order:{cfg.seed}").shuffle(train)
    by_prompt = {student_prompt_for(p): p for p in train}
    executor = Executor(cfg.sandbox)
    n = cfg.student.samples_per_task
    k = cfg.student.real_tasks_per_iteration
    ds = Dataset.from_list([{"prompt": student_prompt_for(p)} for p in train[: k * iterations]])
    seeds = iter(range(10_000, 10_000_000))

    def engine_for(trainer):
        return HFEngine(trainer.model, tok, batch_size=cfg.engine.batch_size)

    def rollout(prompts, trainer):
        uniq = list(dict.fromkeys(prompts))  # robust to either duplicated or unique prompts
        per = n if len(uniq) == len(prompts) else 1
        eng = engine_for(trainer)
        sp = SamplingParams(temperature=cfg.engine.temperature, max_new_tokens=cfg.engine.max_new_tokens_student,
                            stop=STOP, seed=next(seeds))
        groups = eng.generate(prompts if per == 1 else uniq, per, sp)
        trainer.model.train()
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "problem_prompt": []}
        for prompt, comps in zip(prompts if per == 1 else uniq, groups):
            for c in comps:
                out["prompt_ids"].append(c.prompt_token_ids)
                out["completion_ids"].append(c.token_ids)
                out["logprobs"].append(c.logprobs)
                out["problem_prompt"].append(prompt)
        return out

    def reward(prompts, completions, problem_prompt, **kw):
        items, idx = [], []
        scores = [0.0] * len(problem_prompt)
        for j, (pp, comp) in enumerate(zip(problem_prompt, completions)):
            p = by_prompt[pp]
            text = comp if isinstance(comp, str) else comp[0]["content"]
            parsed = parse_student(text, p.metadata["signature"], p.entry_point)
            if parsed:
                items.append((p, Sample(p.id, j, parsed.code)))
                idx.append(j)
        for j, v in zip(idx, executor.verify(items)):
            scores[j] = 1.0 if v.passed else 0.0
        return scores

    class Ctx:  # what the shared evaluate stage needs
        pass

    ctx = Ctx()
    ctx.config = cfg
    ctx.executor = executor
    ctx.eval_problems = sorted(random.Random(f"eval-subset:{cfg.world.seed}").sample(
        world.eval.problems, min(cfg.eval.max_problems, len(world.eval.problems))), key=lambda p: p.id)
    ctx.state = type("St", (), {"seed_counter": 0})()
    ctx.next_seed = lambda: cfg.seed * 1_000_003 + next(seeds)
    curve = []

    def evaluate(step, model_):
        ctx.engine = HFEngine(model_, tok, batch_size=cfg.engine.batch_size)
        log = IterationLog()
        S.evaluate(ctx, log)
        model_.train()
        curve.append((step, log.metrics["eval/all/pass@1"]))

    class EvalEveryStep(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kw):
            if state.global_step % cfg.updates_per_iteration == 0:
                evaluate(state.global_step // cfg.updates_per_iteration, model)

    args = GRPOConfig(
        output_dir=str(Path(out) / "trl-ref-trl"), use_cpu=True, report_to=[], save_strategy="no",
        learning_rate=cfg.learner.lr, per_device_train_batch_size=k * n, gradient_accumulation_steps=1,
        num_generations=n, num_iterations=cfg.updates_per_iteration, max_steps=iterations * cfg.updates_per_iteration,
        beta=0.0, loss_type="grpo", epsilon=cfg.learner.clip_eps, max_grad_norm=cfg.learner.max_grad_norm,
        max_completion_length=cfg.engine.max_new_tokens_student, temperature=cfg.engine.temperature,
        logging_steps=1, seed=cfg.seed, lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=cfg.learner.betas[0], adam_beta2=cfg.learner.betas[1], weight_decay=cfg.learner.weight_decay,
    )
    evaluate(0, model)
    trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=[reward], args=args,
                          train_dataset=ds, rollout_func=rollout)
    trainer.add_callback(EvalEveryStep())
    trainer.train()
    executor.close()
    return curve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--out", default="runs/trl-ref")
    args = ap.parse_args()
    t0 = time.perf_counter()
    a = ours(args.iterations, args.out)
    t1 = time.perf_counter()
    b = trl(args.iterations, args.out)
    t2 = time.perf_counter()
    print(f"\nheld-out pass@1 (toy eval split subset), RLVR, {args.iterations} iterations")
    print(f"{'iteration':>9}  {'project learner':>16}  {'TRL GRPOTrainer':>16}")
    bd = dict(b)
    for step, v in a:
        w = bd.get(step)
        print(f"{step:>9}  {v:>16.3f}  {w if w is None else round(w, 3):>16}")
    print(f"wall: project {t1 - t0:.0f} s, TRL {t2 - t1:.0f} s")


if __name__ == "__main__":
    main()
