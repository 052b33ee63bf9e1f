"""Two GASP iterations on a tiny model through the real Prefect flow (Prefect's test harness
server) with a real MLflow store: proposals are generated, validated and scored, the weights
change, and the MLflow run holds the metrics and the goalpost heatmap."""

import json
import time
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def small_config(model_dir, out_dir, **over):
    from selfplay_core.config import load_config

    sets = [f"model.path={model_dir}", f"out_dir={out_dir}", "iterations=2",
            "method.goalposts_per_iteration=3", "method.proposals_per_anchor=2",
            "student.samples_per_task=4", "student.batch_size=32",
            "eval.n=2", "eval.verdict_n=null", "eval.ks=[1, 2]", "eval.max_problems=8", "eval.goalpost_every=1",
            "eval.goalpost_k=2", "world.goalpost_k=4", "world.max_goalposts=6",
            "engine.max_new_tokens_teacher=192", "engine.max_new_tokens_student=48",
            "learner.lr=1e-3", "sandbox.workers=2", "tracking.run_name=it"]
    sets += [f"{k}={v}" for k, v in over.items()]
    return load_config(None, sets)


def test_two_gasp_iterations_through_the_prefect_flow(prefect_server, tmp_path):
    from mlflow.tracking import MlflowClient
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from safetensors.torch import load_file

    from flows.selfplay import selfplay
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    # The committed toy checkpoint: a model that writes parseable proposals, so the teacher's
    # rewards differ and the update has signal.
    model_dir = ASSET_DIR
    cfg = small_config(model_dir, tmp_path / "runs")
    state = selfplay(config=cfg, return_state=True)
    assert state.is_completed(), state
    result = state.result()

    # Prefect ran each stage as a task of this flow run.
    import asyncio

    async def task_names():
        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
            return {r.name.rsplit("-", 1)[0] for r in runs}

    names = asyncio.run(task_names())
    for stage in ("propose_lemma", "validate_lemma", "estimate_lemma", "score_lemma", "update",
                  "evaluate", "goalposts"):
        assert stage in names, names

    # The weights changed.
    before = load_file(str(Path(model_dir) / "model.safetensors"))
    after = load_file(str(Path(result["checkpoint"]) / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)

    # MLflow: metrics for steps 0..2 and the heatmap artifact.
    client = MlflowClient(result["tracking_uri"])
    run = client.get_run(result["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["method"] == "gasp"
    props = client.get_metric_history(run.info.run_id, "teacher/lemma/proposals")
    assert [m.step for m in props] == [1, 2] and all(m.value == 6 for m in props)
    assert client.get_metric_history(run.info.run_id, "teacher/lemma/reward")
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/all/pass_at_1")] == [0, 1, 2]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "goalposts/solved")] == [0, 1, 2]
    plots = [a.path for a in client.list_artifacts(run.info.run_id, "plots")]
    assert "plots/goalpost_heatmap.png" in plots
    samples = [a.path for a in client.list_artifacts(run.info.run_id, "samples")]
    assert samples
    st = json.loads((Path(result["run_dir"]) / "state.json").read_text())
    assert st["iteration"] == 2 and len(st["goalpost_rows"]) == 3

    # The verdict, one sentence per k, is a tag of the run and a line of the flow run's log (a
    # deployed run has no terminal to print it on); the experiment is of the ML kind.
    verdict = run.data.tags["verdict"].split("; ")
    assert [v.split(" ", 2)[:2] for v in verdict] == [["held-out", "pass@1"], ["held-out", "pass@2"]]
    assert client.get_experiment(run.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"

    async def flow_log():
        from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

        async with get_client() as client:
            logs = await client.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id])))
            return [entry.message for entry in logs]

    # The flow's log lines reach the server from Prefect's background log worker, in batches:
    # drain it, then give the server a bounded while to store them (a busy CI box is slow).
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=60)
    expected = [f"verdict: {v}" for v in verdict]
    deadline = time.monotonic() + 60
    while True:
        logged = [m for m in asyncio.run(flow_log()) if m.startswith("verdict: ")]
        if logged == expected or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert logged == expected
