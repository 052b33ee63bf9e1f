"""Two iterations each of SPICE (with SCOPE's rubric judge) and CompassPlay on the committed toy
model through the real Prefect flow (Prefect's test harness server) with a real MLflow store:
each method's stages run as tasks, the weights change, and MLflow holds the method's metrics and
proposal tables whose rewards follow the method's formula (recomputed here from the logged pass
rates)."""

import asyncio
import json
import math
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

SMALL = ["iterations=2", "student.samples_per_task=4", "student.batch_size=32",
         "eval.n=2", "eval.verdict_n=null", "eval.ks=[1, 2]", "eval.max_problems=6", "eval.goalpost_every=1",
         "eval.goalpost_k=2", "world.goalpost_k=4", "world.max_goalposts=4",
         "engine.max_new_tokens_student=48", "learner.lr=1e-3", "sandbox.workers=2",
         "updates_per_iteration=2"]


@pytest.fixture(scope="module")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def _run(config_file, tmp_path, sets):
    from flows.selfplay import selfplay
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from selfplay_core.config import load_config
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    root = Path(__file__).resolve().parents[2]
    cfg = load_config(root / "configs" / config_file,
                      [f"model.path={ASSET_DIR}", f"out_dir={tmp_path / 'runs'}", *SMALL, *sets])
    state = selfplay(config=cfg, return_state=True)
    assert state.is_completed(), state

    async def task_names():
        async with get_client() as client:
            runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
            return {r.name.rsplit("-", 1)[0] for r in runs}

    return state.result(), asyncio.run(task_names())


def _mlflow(result):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(result["tracking_uri"])
    return client, client.get_run(result["run_id"])


def _samples(client, run_id, step):
    path = client.download_artifacts(run_id, f"samples/proposals_step{step:04d}.json")
    table = json.loads(Path(path).read_text())
    cols, rows = table["columns"], table["data"]
    return [dict(zip(cols, r)) for r in rows]


def _weights_changed(result):
    from safetensors.torch import load_file

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    before = load_file(str(Path(ASSET_DIR) / "model.safetensors"))
    after = load_file(str(Path(result["checkpoint"]) / "model.safetensors"))
    return any(not torch.equal(before[k], after[k]) for k in before)


def test_two_spice_iterations_with_the_rubric_judge(prefect_server, tmp_path):
    result, names = _run("scope-tiny-cpu.yaml", tmp_path, [
        "seed=1", "method.documents_per_iteration=6", "method.proposals_per_document=2",
        "method.rubric.explain_tasks_per_iteration=2", "method.rubric.agreement_samples=8",
        "engine.max_new_tokens_teacher=192", "tracking.run_name=spice"])
    for stage in ("propose_spice", "validate_spice", "estimate_spice", "score_spice",
                  "fidelity_spice", "solve_explain", "update", "evaluate", "goalposts"):
        assert stage in names, names
    assert _weights_changed(result)

    client, run = _mlflow(result)
    rid = run.info.run_id
    assert run.data.tags["method"] == "spice" and run.info.status == "FINISHED"
    props = client.get_metric_history(rid, "teacher/spice/proposals")
    assert [m.step for m in props] == [1, 2] and all(m.value == 12 for m in props)
    for key in ("teacher/spice/reward", "teacher/spice/acceptance", "scope/explain/pass_rate",
                "scope/explain/parse_rate", "learner/teacher_rollouts"):
        assert [m.step for m in client.get_metric_history(rid, key)] == [1, 2], key
    # The judge graded executor-verified answers in at least one iteration.
    pairs = client.get_metric_history(rid, "scope/judge/pairs")
    assert pairs and all(m.value >= 1 for m in pairs)
    for key in ("scope/judge/agreement_all", "scope/judge/parse_rate"):
        assert all(0.0 <= m.value <= 1.0 for m in client.get_metric_history(rid, key))

    # Rewards follow SPICE's formula: exp(-(p(1-p) - 0.25)^2 / 0.02) valid, -0.1 invalid.
    rows = _samples(client, rid, 1) + _samples(client, rid, 2)
    assert rows and any(r["accepted"] for r in rows)
    for r in rows:
        want = (math.exp(-((r["pass_rate"] * (1 - r["pass_rate"]) - 0.25) ** 2) / 0.02)
                if r["accepted"] else -0.1)
        assert r["reward"] == pytest.approx(want), r
        assert r["kind"] == "spice" and r["anchor"].startswith("toy:")

    # The frozen judge is the starting model; its rubrics are kept in the run state.
    st = json.loads((Path(result["run_dir"]) / "state.json").read_text())
    from selfplay_core.toyworld.bootstrap import ASSET_DIR
    assert st["method_state"]["scope"]["judge_model"] == str(ASSET_DIR)
    assert st["method_state"]["scope"]["rubrics"]


def test_two_compassplay_iterations(prefect_server, tmp_path):
    result, names = _run("compassplay-tiny-cpu.yaml", tmp_path, [
        "method.proposals_per_iteration=12", "engine.max_new_tokens_teacher=192",
        "tracking.run_name=compass"])
    for stage in ("propose_compass", "validate_compass", "estimate_compass", "score_compass", "update"):
        assert stage in names, names
    assert _weights_changed(result)

    client, run = _mlflow(result)
    rid = run.info.run_id
    assert run.data.tags["method"] == "compassplay"
    props = client.get_metric_history(rid, "teacher/compass/proposals")
    assert [m.step for m in props] == [1, 2] and all(m.value == 12 for m in props)
    share = client.get_metric_history(rid, "compass/param_share")
    assert share and all(0.1 < m.value < 0.5 for m in share)   # one of four blocks + norm
    cos = client.get_metric_history(rid, "teacher/compass/cosine")
    assert cos and all(-1.0 <= m.value <= 1.0 for m in cos)
    assert client.get_metric_history(rid, "teacher/compass/time_per_proposal_s")

    # Eligible proposals (0 < p < 1) carry a cosine, other accepted ones 0, rejected ones the
    # teacher's penalties; at least one was scored by its gradient.
    rows = _samples(client, rid, 1) + _samples(client, rid, 2)
    scored = 0
    for r in rows:
        if not r["accepted"]:
            assert r["reward"] in (-1.0, -0.5)
        elif 0.0 < r["pass_rate"] < 1.0:
            assert -1.0 <= r["reward"] <= 1.0
            scored += r["reward"] != 0.0
        else:
            assert r["reward"] == 0.0
    assert scored >= 1
    st = json.loads((Path(result["run_dir"]) / "state.json").read_text())
    assert len(st["method_state"]["compass"]["reference_ids"]) == 8
    # The reward-vs-gain diagnostic: the reference pass rate each iteration, with the iteration's
    # mean cosine, kept in the run state (a correlation needs 3 pairs: none after 2 iterations).
    rates = client.get_metric_history(rid, "compass/reference_pass_rate")
    assert sorted(m.step for m in rates) == [1, 2] and all(0.0 <= m.value <= 1.0 for m in rates)
    hist = st["method_state"]["compass"]["gain_history"]
    assert [h[0] for h in hist] == [0, 1]
    by_step = {m.step: m.value for m in cos}
    for (it, reward, rate), step in zip(hist, (1, 2)):
        assert rate == pytest.approx({m.step: m.value for m in rates}[step])
        assert (reward is None) == (step not in by_step)
        if reward is not None:
            assert reward == pytest.approx(by_step[step])
    assert not client.get_metric_history(rid, "compass/reward_gain_corr")
