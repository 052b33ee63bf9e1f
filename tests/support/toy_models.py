"""Checkpoints that tests build from the committed toy model."""

from pathlib import Path


def random_toy_model(out: Path, seed: int = 1234) -> Path:
    """The toy model's architecture and tokenizer with freshly initialised weights: a policy
    whose own proposals never parse."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ASSET_DIR)).save_pretrained(out)
    AutoTokenizer.from_pretrained(ASSET_DIR).save_pretrained(out)
    return out


def depth3_goalposts_file(tmp: Path, n: int):
    """The toy world's first `n` depth-3 pool tasks as a fixed goalpost file (`world.goalposts`).
    Returns (its path, the goalposts)."""
    import json

    from selfplay_core.toyworld.splits import build_world

    goalposts = [p for p in build_world(0).goalpost_pool.problems if p.metadata["depth"] == 3][:n]
    gp = tmp / "goalposts.json"
    gp.write_text(json.dumps({"format": "selfplay-goalposts/1", "ids": [g.id for g in goalposts],
                              "reserve": []}))
    return gp, goalposts


def gasp_run_with_teacher(tmp: Path, executor, *sets: str):
    """A GASP run context from the toy checkpoint with a copy of the same weights as a separate
    teacher (`teacher.model`; `sets` override, e.g. teacher.train=false), four depth-3
    goalposts and small budgets, and its method, set up. Returns (cfg, ctx, method, the
    teacher's folder); the caller closes ctx."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfplay_core.config import load_config
    from selfplay_core.loop.context import build_context
    from selfplay_core.methods import method_for
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    teacher = tmp / "teacher"
    AutoModelForCausalLM.from_pretrained(ASSET_DIR).save_pretrained(teacher)
    AutoTokenizer.from_pretrained(ASSET_DIR).save_pretrained(teacher)
    gp, _ = depth3_goalposts_file(tmp, 4)
    cfg = load_config("configs/tiny-cpu.yaml", [
        f"model.path={ASSET_DIR}", f"out_dir={tmp / 'runs'}", f"teacher.model={teacher}",
        f"world.goalposts={gp}", "world.max_goalposts=null", "iterations=2",
        "method.goalposts_per_iteration=4", "method.proposals_per_anchor=2",
        "student.samples_per_task=4", "student.batch_size=32", "student.fill=none",
        "engine.max_new_tokens_teacher=160", "engine.max_new_tokens_student=64",
        "eval.verdict=false", *sets])
    ctx = build_context(cfg, tmp / "run", executor=executor)
    method = method_for(cfg.method)
    method.setup(ctx)
    return cfg, ctx, method, teacher
