"""A Prefect retry of the selfplay flow resumes the run from its last complete iteration, into the
same MLflow run, and ends where an uninterrupted run ends. The fault is injected once, in
iteration 2's `update` stage, through the CLI's hook for stage names (tasks.stages.stage_listeners:
a listener that raises is a fault in the stage). The retry happens in the same process, so the
test also shows that nothing held in memory by the failed attempt leaks into the resumed one.
A stage that hangs past its limit (flow.timeouts) fails its task and the retry resumes the same
way."""

import json
import re
import socket
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def small_config(model_dir, out_dir, *extra):
    from selfplay_core.config import load_config

    return load_config(None, [
        f"model.path={model_dir}", f"out_dir={out_dir}", "iterations=2",
        "method.goalposts_per_iteration=3", "method.proposals_per_anchor=2",
        "student.samples_per_task=4", "student.batch_size=32",
        "eval.n=2", "eval.verdict_n=null", "eval.ks=[1, 2]", "eval.max_problems=8", "eval.goalpost_every=1",
        "eval.goalpost_k=2", "world.goalpost_k=4", "world.max_goalposts=6",
        "engine.max_new_tokens_teacher=120", "engine.max_new_tokens_student=48",
        "learner.lr=1e-3", "sandbox.workers=2", "tracking.run_name=rt", *extra])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same small run without Prefect and without faults."""
    from selfplay_core.loop.driver import run_selfplay
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    return run_selfplay(small_config(ASSET_DIR, tmp_path_factory.mktemp("ref")))


def assert_same_run(ref, result) -> None:
    """The resumed run's state and weights equal the uninterrupted run's."""
    from safetensors.torch import load_file

    a = json.loads((Path(ref.run_dir) / "state.json").read_text())
    b = json.loads((Path(result["run_dir"]) / "state.json").read_text())
    for key in ("iteration", "buffer", "goalpost_ids", "goalpost_rows", "goalpost_labels", "rng_state",
                "seed_counter", "id_counter", "real_cursor"):
        assert a[key] == b[key], key
    wa = load_file(str(Path(ref.checkpoint) / "model.safetensors"))
    wb = load_file(str(Path(result["checkpoint"]) / "model.safetensors"))
    diff = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    print(f"\nmax |weight diff| after a retried flow = {diff:.3g}")
    assert diff <= 1e-6


class FailOnce:
    """Raises when `stage` starts for the `nth` time, once."""

    def __init__(self, stage: str, nth: int):
        self.stage, self.nth, self.seen, self.fired = stage, nth, 0, False

    def __call__(self, name: str) -> None:
        if name == self.stage:
            self.seen += 1
            if self.seen == self.nth and not self.fired:
                self.fired = True
                raise RuntimeError(f"injected fault in {name} #{self.nth}")


def test_a_flow_retry_resumes_the_run_and_matches_an_uninterrupted_one(prefect_server, reference,
                                                                        tmp_path):
    from mlflow.tracking import MlflowClient

    from flows.selfplay import for_config
    from selfplay_core.toyworld.bootstrap import ASSET_DIR
    from tasks.stages import stage_listeners

    cfg = small_config(ASSET_DIR, tmp_path / "retry", "flow.retries=1", "flow.retry_delay_s=0")
    fault = FailOnce("update", 2)
    stage_listeners.append(fault)
    try:
        state = for_config(cfg)(config=cfg, return_state=True)
    finally:
        stage_listeners.remove(fault)
    assert fault.fired and state.is_completed(), state
    result = state.result()
    fr = read_flow_run(state.state_details.flow_run_id)
    assert fr.run_count == 2  # one failure, one retry
    b = json.loads((Path(result["run_dir"]) / "state.json").read_text())
    assert b["run_key"] == f"prefect-flow-run:{fr.id}"
    assert_same_run(reference, result)

    # One MLflow run, continued by the retry: each metric step once.
    client = MlflowClient(result["tracking_uri"])
    run = client.get_run(result["run_id"])
    assert run.info.status == "FINISHED" and result["run_id"] == b["run_id"]
    for key in run.data.metrics:
        steps = [m.step for m in client.get_metric_history(result["run_id"], key)]
        assert len(steps) == len(set(steps)), (key, steps)
    assert sorted(m.step for m in client.get_metric_history(result["run_id"], "teacher/lemma/proposals")) == [1, 2]
    assert run.data.tags["checkpoint.iteration"] == "2"


def read_flow_run(flow_run_id):
    import asyncio

    from prefect import get_client

    async def read():
        async with get_client() as client:
            return await client.read_flow_run(flow_run_id)
    return asyncio.run(read())


def read_task_runs(flow_run_id) -> list:
    import asyncio

    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def read():
        async with get_client() as client:
            return await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return asyncio.run(read())


def hang_once_in(stage_fn, nth: int, server: socket.socket):
    """Test-only hook standing in for a hung server: the `nth` call of the stage first reads
    from `server`, which accepts the connection and never answers (a blocking read, as on a
    stalled inference server), then does the real work. Other calls only do the real work."""
    calls = {"n": 0}

    def stage(*args):
        calls["n"] += 1
        if calls["n"] == nth:
            with socket.create_connection(server.getsockname()) as conn:
                conn.settimeout(600)  # a safety net only: the stage's limit is far shorter
                conn.recv(1)
        return stage_fn(*args)
    return stage


# pytest-timeout's thread method: its default (signal) installs a SIGALRM handler, and Prefect
# then times tasks out from a watcher thread, which cannot interrupt a blocking read. A flow
# run by `selfplay run` or a worker has no such handler and gets the alarm.
@pytest.mark.timeout(1200, method="thread")
def test_a_stage_past_its_timeout_fails_and_the_retry_resumes(prefect_server, reference, tmp_path,
                                                              monkeypatch):
    """Iteration 2's update hangs: its task fails at flow.timeouts.update_s (state TimedOut), the
    flow run fails, and its retry resumes from iteration 1 (not from the start) and ends where
    the uninterrupted run ends."""
    from collections import Counter

    from flows.selfplay import for_config
    from selfplay_core import stages
    from selfplay_core.toyworld.bootstrap import ASSET_DIR
    from tasks.stages import stage_listeners

    limit = 45  # far above a normal update of this config, far below the safety net
    cfg = small_config(ASSET_DIR, tmp_path / "hang", "flow.retries=1", "flow.retry_delay_s=0",
                       f"flow.timeouts.update_s={limit}")
    started = Counter()

    def count(name: str) -> None:
        started[name] += 1

    with socket.create_server(("127.0.0.1", 0)) as silent:
        monkeypatch.setattr(stages, "update", hang_once_in(stages.update, 2, silent))
        stage_listeners.append(count)
        try:
            state = for_config(cfg)(config=cfg, return_state=True)
        finally:
            stage_listeners.remove(count)
    assert state.is_completed(), state
    fr = read_flow_run(state.state_details.flow_run_id)
    assert fr.run_count == 2  # the timed-out attempt and its retry
    timed_out = [t for t in read_task_runs(fr.id) if t.state and t.state.name == "TimedOut"]
    assert [t.name.rsplit("-", 1)[0] for t in timed_out] == ["update"]
    assert re.search(rf"exceeded timeout of {limit}(\.0)? second", timed_out[0].state.message)
    # Resumed, not restarted: the updates of iterations 1, 2 (hung) and 2 again; held-out
    # evaluations at the start, after iteration 1, and after iteration 2 once.
    assert started["update"] == 3 and started["evaluate"] == 3
    assert_same_run(reference, state.result())


def test_a_retry_does_not_resume_a_run_it_did_not_start(prefect_server, tmp_path):
    """An unfinished run in the folder that this flow run did not start is refused by every
    attempt (first and retry), never resumed and never replaced."""
    from flows.selfplay import for_config
    from selfplay_core.state import RunState, StateError, save_state
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    cfg = small_config(ASSET_DIR, tmp_path / "other", "flow.retries=1", "flow.retry_delay_s=0")
    run_dir = tmp_path / "other" / "rt"
    save_state(RunState(run_id="not-ours", iteration=0, run_key="prefect-flow-run:someone-else"),
               run_dir / "state.json")
    state = for_config(cfg)(config=cfg, return_state=True)
    assert state.is_failed()
    with pytest.raises(StateError, match="holds an unfinished run"):
        state.result()
    assert json.loads((run_dir / "state.json").read_text())["run_id"] == "not-ours"
