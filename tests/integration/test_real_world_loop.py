"""One GASP (+ real tasks) iteration on the real-data world with a micro model: goalposts mined
from LiveCodeBench problems before the window, proposals made from them, real LCB training tasks
solved, held-out evaluation on the LCB window and HumanEval+, MLflow tags naming the datasets.
The micro model solves nothing; this is the plumbing of the real-data setting."""

import json
import re
from pathlib import Path

import pytest


def lcb_config(model_dir, out_dir, *extra):
    from selfplay_core.config import load_config

    return load_config(None, [
        f"model.path={model_dir}", f"out_dir={out_dir}", "method=gasp+rlvr", "iterations=1",
        "world.name=lcb", "world.eval_sets=[lcb, humaneval+]", "world.max_goalpost_candidates=4",
        "world.goalpost_k=2", "world.max_goalposts=2",
        "method.goalposts_per_iteration=2", "method.proposals_per_anchor=2",
        "student.samples_per_task=2", "student.batch_size=8", "student.real_tasks_per_iteration=1",
        "eval.n=2", "eval.verdict_n=null", "eval.ks=[1, 2]", "eval.max_problems=2", "eval.goalpost_every=1",
        "eval.goalpost_k=2", "engine.max_new_tokens_teacher=48", "engine.max_new_tokens_student=32",
        "learner.micro_batch_size=4", "sandbox.workers=2", "tracking.run_name=lcb", *extra])


def test_gasp_iteration_on_the_lcb_world(long_context_micro, tmp_path, executor):
    from mlflow.tracking import MlflowClient

    from selfplay_core.datasets.livecodebench import load_lcb
    from selfplay_core.loop.driver import run_selfplay

    cfg = lcb_config(long_context_micro, tmp_path / "runs")
    summary = run_selfplay(cfg, executor=executor)

    client = MlflowClient(summary.tracking_uri)
    run = client.get_run(summary.run_id)
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert tags["world"] == "lcb" and tags["engine"] == "hf"
    # Every split is tagged with its dataset version and a content hash.
    lcb_version = load_lcb(None, window="test").version
    for split in ("data.eval.lcb", "data.eval.humanevalplus", "data.train", "data.goalpost_pool",
                  "data.goalposts"):
        assert re.search(r" [0-9a-f]{64}$", tags[split]), (split, tags[split])
    assert tags["data.eval.lcb"].startswith(f"{lcb_version} window=test n=2/192 ")
    assert tags["data.eval.humanevalplus"].startswith("HumanEval+ v0.1.10 n=2/164 ")
    assert tags["data.goalpost_pool"].startswith(f"{lcb_version} window=train n=4 ")
    assert "mined (unsolved) k=2" in tags["data.goalposts"]

    # Goalposts were mined from pre-window LCB problems, and written as a reusable set.
    gp = json.loads((Path(summary.run_dir) / "goalposts.json").read_text())
    assert gp["format"] == "selfplay-goalposts/1" and gp["k"] == 2 and gp["candidates"] == 4
    assert len(gp["ids"]) == 2 and all(i.startswith("lcbv5-train-") for i in gp["ids"])

    def history(key):
        return [(m.step, m.value) for m in client.get_metric_history(summary.run_id, key)]

    # Proposals were made from the goalposts; real LCB training tasks were solved.
    assert history("teacher/lemma/proposals") == [(1, 4.0)]
    assert [s for s, _ in history("student/real/pass_rate")] == [1]
    # Held-out evaluation ran on both sets before and after the iteration; goalposts were tracked.
    for key in ("eval/lcb/pass_at_1", "eval/humanevalplus/pass_at_2", "eval/all/pass_at_1",
                "goalposts/total"):
        assert [s for s, _ in history(key)] == [0, 1], key
    assert history("goalposts/total") == [(0, 2.0), (1, 2.0)]
    st = json.loads((Path(summary.run_dir) / "state.json").read_text())
    assert st["iteration"] == 1 and st["goalpost_ids"] == gp["ids"]


def test_a_goalpost_set_file_replaces_mining_and_bad_ones_fail_clearly(long_context_micro, tmp_path,
                                                                       executor):
    from selfplay_core.loop.context import build_context
    from selfplay_core.problems import InputError

    gp_file = tmp_path / "gp.json"
    cfg = lcb_config(long_context_micro, tmp_path / "runs", "world.eval_sets=[lcb]",
                     f"world.goalposts={gp_file}", "world.max_goalposts=null",
                     "world.max_goalpost_candidates=null")
    with pytest.raises(InputError, match="gp.json: file not found"):
        build_context(cfg, tmp_path / "r0", executor=executor)
    gp_file.write_text(json.dumps({"ids": ["abc365_b"]}))  # a test-window id: not a candidate
    with pytest.raises(InputError, match=r"field 'ids': 1 of 1 ids are not in this run's goalpost pool"):
        build_context(cfg, tmp_path / "r1", executor=executor)
    train = sorted(p.id for p in __import__("selfplay_core.datasets.livecodebench", fromlist=["x"])
                   .load_lcb(None, window="train").problems)[:3]
    gp_file.write_text(json.dumps({"format": "selfplay-goalposts/1", "ids": train}))
    ctx = build_context(cfg, tmp_path / "r2", executor=executor)
    try:
        assert [g.id for g in ctx.goalposts] == train
        assert {p.metadata["eval_set"] for p in ctx.eval_problems} == {"lcb"}
        assert len(ctx.eval_problems) == 2
        assert ctx.world.splits()["goalposts"].version.startswith("file gp.json (3 of 424 candidates)")
    finally:
        ctx.close()
