"""One AZR iteration with all three task types (deduction, abduction, induction) on the micro
model, straight through `run_selfplay` (the Prefect path is covered by test_selfplay_flow.py).

The micro model cannot write deduction/abduction proposals (nor can the toy model: it was
bootstrapped on described tasks only), so that the whole path — validation in the sandbox,
student answers, verification, learnability reward, buffers — is exercised, the stage hook
replaces two of each type's sampled proposals by written ones, tokenized and scored under the
real policy (so the learner trains on them like on any rollout). Everything else is real."""

import json
from pathlib import Path

SCRIPTED = {
    "deduction": [
        "### Program\ndef f(x):\n    return sorted(x)[::-1]\n### Input\n[3, 1, 2]\n### End",
        "### Program\n```python\ndef f(x):\n    return sum(v * v for v in x)\n```\n### Input\nx = [1, 2]\n",
    ],
    "abduction": [
        "### Program\ndef f(x):\n    return len(x) % 3\n### Input\n[5, 5]\n### End",
        "### Program\ndef f(x):\n    return [v + 1 for v in x]\n### Input\n[0, 9]\n### End",
    ],
}


def _scripted(ctx, text, prompt_ids, temperature):
    import torch

    from selfplay_core.engines.base import Completion
    from selfplay_core.rl.learner import token_logprobs

    ids = ctx.tokenizer(text, add_special_tokens=False)["input_ids"]
    seq = torch.tensor([list(prompt_ids) + ids])
    with torch.no_grad():
        lp, _ = token_logprobs(ctx.learner.unwrapped, seq, torch.ones_like(seq),
                               temps=torch.tensor([temperature]))
    return Completion(text, ids, lp[0, len(prompt_ids):].tolist(), "stop", list(prompt_ids))


def scripting_call(name, fn, *args):
    out = fn(*args)
    if name in ("propose_azr_deduction", "propose_azr_abduction"):
        ctx, task_type = args[0], fn.__self__.task_type   # the stage is the round's propose hook
        for p, text in zip(out, SCRIPTED[task_type]):
            p.completion = _scripted(ctx, text, p.completion.prompt_token_ids, p.temperature)
    return out


def test_one_azr_iteration_with_three_task_types(micro_model_dir, tmp_path):
    from selfplay_core.config import load_config
    from selfplay_core.loop.driver import run_selfplay

    cfg = load_config(None, [
        "method=azr", f"out_dir={tmp_path / 'runs'}", "iterations=1",
        "method.task_types=[deduction, abduction, induction]", "method.proposals_per_iteration=4",
        "method.references=3", "student.samples_per_task=4", "student.batch_size=32",
        "eval.n=2", "eval.verdict_n=null", "eval.ks=[1, 2]", "eval.max_problems=4", "eval.goalpost_every=1",
        "eval.goalpost_k=2", "world.goalpost_k=2", "world.max_goalposts=3",
        "engine.max_new_tokens_teacher=96", "engine.max_new_tokens_student=32",
        "engine.teacher_temperature=0.4", "learner.lr=1e-3", "sandbox.workers=2",
        "tracking.run_name=azr3"])
    seen = []

    groups = set()

    def call(name, fn, *args):
        seen.append(name)
        if name == "update":  # (task type, role): the groups TRR++ normalizes within
            _, _, teacher, student, _ = args   # (ctx, method, proposals, student batch, log)
            groups.update((p.kind, "proposer") for p in teacher)
            groups.update((kind, "solver") for kind, _ in student)
        return scripting_call(name, fn, *args)

    summary = run_selfplay(cfg, call=call, model_dir=micro_model_dir)
    import os
    if os.environ.get("AZR_DEBUG"):
        st = json.loads((Path(summary.run_dir) / "state.json").read_text())
        print(json.dumps(st["pending_metrics"] or st["history"][-1], indent=1, sort_keys=True))
    for t in ("deduction", "abduction", "induction"):
        for stage in ("propose", "validate", "estimate", "score"):
            assert f"{stage}_azr_{t}" in seen

    assert {("azr_deduction", "proposer"), ("azr_abduction", "proposer"), ("azr_induction", "proposer"),
            ("azr_deduction", "solver"), ("azr_abduction", "solver")} <= groups

    st = json.loads((Path(summary.run_dir) / "state.json").read_text())
    metrics = st["history"][-1]
    for t in ("deduction", "abduction", "induction"):
        k = f"azr_{t}"
        assert metrics[f"teacher/{k}/proposals"] == 4
        assert f"teacher/{k}/acceptance" in metrics and f"teacher/{k}/reward" in metrics
    # The written proposals pass validation, reach the student and are scored by learnability.
    for t in ("deduction", "abduction"):
        k = f"azr_{t}"
        assert metrics[f"teacher/{k}/accepted"] >= 2
        assert 0.0 <= metrics[f"teacher/{k}/pass_rate"] <= 1.0
        assert 0.0 <= metrics[f"student/{k}/reward"] <= 1.0
    assert metrics["teacher/azr/proposals"] == 12

    # Accepted triplets joined their own type's buffer, with the program and input as the text
    # the similarity gate compares; the deduction expected outputs came from the executor.
    buf = {}
    for item in st["buffer"]:
        buf.setdefault(item["kind"], []).append(item)
    assert len(buf["azr_deduction"]) >= 2 and len(buf["azr_abduction"]) >= 2
    by_code = {i["code"]: i for i in buf["azr_deduction"]}
    rev = by_code["def f(x):\n    return sorted(x)[::-1]\n"]
    assert rev["outputs"] == [[3, 2, 1]] and rev["extra"]["text"].endswith("[3, 1, 2]")

    # One update on six (task type, role) groups' rollouts; MLflow has the per-type metrics.
    from mlflow.tracking import MlflowClient
    client = MlflowClient(summary.tracking_uri)
    run = client.get_run(summary.run_id)
    for key in ("teacher/azr_deduction/acceptance", "teacher/azr_abduction/reward",
                "teacher/azr_induction/acceptance", "student/azr_abduction/reward",
                "learner/teacher_rollouts"):
        assert key in run.data.metrics, key
    assert run.data.metrics["learner/teacher_rollouts"] >= 8
    # The model's own proposals are rejected by reason (the micro model writes no valid ones).
    assert any(k.startswith("rejections/azr_deduction/") for k in run.data.metrics)
