"""Two iterations of R-Zero and of STaR on the committed toy model through the real Prefect flow
(Prefect's test harness server) with a real MLflow store: each method's stages run as tasks,
and its own metrics — R-Zero's pseudo-label accuracy, STaR's rationalization yield — reach
MLflow with the values an independent recount of the run's records gives."""

import asyncio
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def small_config(out_dir, *sets):
    from selfplay_core.config import load_config
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    return load_config(None, [
        f"model.path={ASSET_DIR}", f"out_dir={out_dir}", "iterations=2", "updates_per_iteration=1",
        "eval.n=2", "eval.verdict_n=null", "eval.ks=[1, 2]", "eval.max_problems=8", "eval.goalpost_every=2",
        "eval.goalpost_k=2", "world.goalpost_k=4", "world.max_goalposts=6",
        "engine.max_new_tokens_teacher=120", "engine.max_new_tokens_student=48",
        "learner.lr=1e-3", "sandbox.workers=2", *sets])


def task_names(state) -> set[str]:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def read():
        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
            return {r.name.rsplit("-", 1)[0] for r in runs}
    return asyncio.run(read())


def history(client, run_id, key):
    return {m.step: m.value for m in client.get_metric_history(run_id, key)}


def run_flow(cfg):
    from mlflow.tracking import MlflowClient

    from flows.selfplay import selfplay

    state = selfplay(config=cfg, return_state=True)
    assert state.is_completed(), state
    result = state.result()
    client = MlflowClient(result["tracking_uri"])
    run = client.get_run(result["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["method"] == cfg.method.name
    return state, result, client, run.info.run_id


def _true_outputs_in_process(question, inputs):
    """The truth recomputed here, without the sandbox or the method's code: the toy task the
    question describes, its program exec'd in this process (it is our own, trusted code)."""
    from selfplay_core.toyworld.fidelity import parse_description

    task = parse_description(question)
    if task is None:
        return None
    ns: dict = {}
    exec(task.program(), ns)
    try:
        return [ns["f"](*args) for args in inputs]
    except Exception:
        return None


def test_two_rzero_iterations_log_pseudo_label_accuracy(prefect_server, tmp_path):
    cfg = small_config(tmp_path / "runs", "method=r-zero", "method.challenger_prompts=2",
                       "method.samples_per_prompt=4", "method.answers=10", "teacher.min_inputs=3",
                       "student.batch_size=64", "tracking.run_name=rzero-it")
    state, result, client, run_id = run_flow(cfg)
    names = task_names(state)
    for stage in ("propose_rzero", "validate_rzero", "estimate_rzero", "score_rzero", "fidelity_rzero",
                  "update", "evaluate"):
        assert stage in names, names

    assert history(client, run_id, "teacher/rzero/proposals") == {1: 8, 2: 8}
    accepted = history(client, run_id, "teacher/rzero/accepted")
    assert set(accepted) == {1, 2} and sum(accepted.values()) > 0

    # Recount the diagnostic from the run's buffer (the accepted tasks with their pseudo-labels
    # and p̂) against the truth computed in this process.
    st = json.loads((Path(result["run_dir"]) / "state.json").read_text())
    items = [b for b in st["buffer"] if b["kind"] == "rzero"]
    assert len(items) == sum(accepted.values())
    from selfplay_core.values import from_json_obj
    acc_all = history(client, run_id, "teacher/rzero/label_accuracy_all")
    acc_kept = history(client, run_id, "teacher/rzero/label_accuracy")
    recounted = 0
    for step in (1, 2):
        here = [b for b in items if b["iteration"] == step - 1]
        assert all(b["code"] == "" for b in here)          # no reference program anywhere
        checked = []
        for b in here:
            inputs = from_json_obj(b["inputs"])
            truth = _true_outputs_in_process(b["question"], inputs)
            if truth is not None:
                checked.append((truth == from_json_obj(b["outputs"]), b["pass_rate"]))
        recounted += len(checked)
        if checked:
            assert acc_all[step] == pytest.approx(sum(ok for ok, _ in checked) / len(checked))
            kept = [ok for ok, p in checked if 0.3 <= p <= 0.7]
            if kept:
                assert acc_kept[step] == pytest.approx(sum(kept) / len(kept))
            else:
                assert step not in acc_kept
        else:
            assert step not in acc_all
    assert recounted > 0     # the toy model's questions are toy descriptions: most have a truth
    # The Challenger's reward and its parts are logged every iteration; the update ran.
    for key in ("teacher/rzero/reward", "learner/teacher_rollouts"):
        assert set(history(client, run_id, key)) == {1, 2}, key
    assert [m.step for m in client.get_metric_history(run_id, "eval/all/pass_at_1")] == [0, 1, 2]


def test_two_star_iterations_log_rationalization_yield(prefect_server, tmp_path):
    from safetensors.torch import load_file
    import torch

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    # One sample per task on 8 tasks: enough of them fail for the rationalization to run.
    cfg = small_config(tmp_path / "runs", "method=star", "student.real_tasks_per_iteration=8",
                       "student.samples_per_task=1", "student.batch_size=64", "method.keep_per_task=1",
                       "tracking.run_name=star-it")
    state, result, client, run_id = run_flow(cfg)
    names = task_names(state)
    assert {"solve_real", "rationalize", "update", "evaluate"} <= names, names

    retried = history(client, run_id, "student/rationalized/retried")
    solved = history(client, run_id, "student/rationalized/solved")
    yld = history(client, run_id, "student/rationalized/yield")
    real = history(client, run_id, "student/real/pass_rate")
    assert set(real) == {1, 2} and retried
    for step, n in retried.items():
        # one sample per task: the failed tasks are the ones whose sample failed
        assert n == round(8 * (1 - real[step]))
        assert yld[step] == pytest.approx(solved[step] / n)
    # The learner saw exactly the kept completions: the passing first samples and one
    # rationalization per rescued task, all with advantage 1, old logprobs = the policy's own
    # (the rationalized ones rescored under the prompt without the hint), so the single
    # update's mean ratio is 1.
    for step in (1, 2):
        trained = (history(client, run_id, "student/trained/first_pass")[step]
                   + history(client, run_id, "student/trained/rationalized")[step])
        assert trained == round(8 * real[step]) + solved.get(step, 0)
        if trained:
            assert history(client, run_id, "learner/student_rollouts")[step] == trained
            assert history(client, run_id, "learner/signal_share")[step] == 1.0
            assert history(client, run_id, "learner/ratio_mean")[step] == pytest.approx(1.0, abs=2e-3)
    before = load_file(str(Path(ASSET_DIR) / "model.safetensors"))
    after = load_file(str(Path(result["checkpoint"]) / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)
