"""Acceptance: a toy-world run killed with SIGKILL in the middle of an iteration and continued with
`selfplay run --resume` ends in the same state as an uninterrupted run with the same seed (same
buffers, goalpost matrix, counters, cursor; the same weights and optimizer state), and its MLflow
run holds each metric step exactly once, with the same values.

The reference runs without Prefect (`--no-prefect`), the killed run and its resume through the
CLI's default (the Prefect flow), so the test also shows that both paths compute the same run.
The killed run also uploads its checkpoints to a checkpoint store (a local folder here), and its
local checkpoints are deleted before the resume, which must fetch and verify the stored copy.
The kill lands while iteration 2 is between its stages: after the Prefect log reports iteration
1 done and iteration 2's `estimate_lemma` task finished, and before state.json says 2."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from tests.support.cli_runs import ROOT, cli, cli_env, run_to_end, tiny_config

pytestmark = pytest.mark.slow

ITERATIONS = 3


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return cli_env(tmp_path_factory.mktemp("prefect-home"))


def run_and_kill_mid_iteration_2(args: list[str], env: dict, log: Path, state: Path) -> None:
    with open(log, "w") as f:
        p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 480
        while True:
            assert p.poll() is None, "the run ended before it could be killed:\n" + log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no sign of iteration 2:\n" + log.read_text()[-3000:]
            text = log.read_text(errors="replace")
            k = text.find("iteration 1:")
            if k != -1 and "Task run 'estimate_lemma" in text[k:]:
                break
            time.sleep(0.02)
        os.kill(p.pid, signal.SIGKILL)
        assert p.wait(timeout=60) == -signal.SIGKILL
    finally:
        try:  # what the killed process left behind (the temporary Prefect server, sandbox workers)
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    tasks = [ln for ln in log.read_text(errors="replace").splitlines() if "Task run '" in ln]
    print(f"\nkilled after: {tasks[-1] if tasks else '?'}")
    st = json.loads(state.read_text())
    assert st["iteration"] == 1 and st["metrics_logged_through"] == 1, "not killed inside iteration 2"


def mlflow_metrics(out_dir: Path, run_id: str) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    c = MlflowClient(f"sqlite:///{out_dir}/mlruns/mlflow.db")
    run = c.get_run(run_id)
    assert run.info.status == "FINISHED"
    return {k: [(m.step, m.value) for m in c.get_metric_history(run_id, k)] for k in run.data.metrics}


def test_sigkill_mid_iteration_then_resume_equals_an_uninterrupted_run(tmp_path, env):
    from safetensors.torch import load_file

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    config = tiny_config(tmp_path / "tiny.yaml", ASSET_DIR, iterations=ITERATIONS, run_name="kt",
                         verdict_n=None)
    ref_out, kill_out = tmp_path / "ref", tmp_path / "kill"
    t0 = time.monotonic()
    run_to_end(cli("--config", str(config), "--set", f"out_dir={ref_out}", "--no-prefect"), env,
               tmp_path / "ref.log")
    t1 = time.monotonic()
    run_dir = kill_out / "kt"
    store = tmp_path / "store"
    run_and_kill_mid_iteration_2(cli("--config", str(config), "--set", f"out_dir={kill_out}",
                                     "--set", f"tracking.checkpoint_store={store}"), env,
                                 tmp_path / "kill.log", run_dir / "state.json")
    killed = json.loads((run_dir / "state.json").read_text())
    # Iteration 1's checkpoint went to the store too; lose the local one: the resume fetches it.
    assert killed["checkpoint_uri"] == str(store / killed["run_id"] / "checkpoints" / "iter-0001")
    shutil.rmtree(run_dir / "checkpoints")
    t2 = time.monotonic()
    run_to_end(cli("--resume", str(run_dir)), env, tmp_path / "resume.log")  # config: run_dir/config.yaml
    t3 = time.monotonic()
    print(f"\nreference {t1 - t0:.0f} s, run until killed {t2 - t1:.0f} s, resume {t3 - t2:.0f} s")

    ref = json.loads((ref_out / "kt" / "state.json").read_text())
    res = json.loads((run_dir / "state.json").read_text())
    assert res["run_id"] == killed["run_id"]  # the same MLflow run, continued
    assert res["iteration"] == ref["iteration"] == ITERATIONS and res["finished"]
    for key in ("buffer", "goalpost_ids", "goalpost_rows", "goalpost_labels", "rng_state", "seed_counter",
                "id_counter", "real_cursor", "last_checkpoint", "metrics_logged_through"):
        assert res[key] == ref[key], key
    assert len(ref["buffer"]) > 0 and len(ref["goalpost_rows"]) == ITERATIONS + 1

    def untimed(history):
        return [{k: v for k, v in h.items() if not k.startswith("time/")} for h in history]
    assert untimed(res["history"]) == untimed(ref["history"])

    # Weights and optimizer state.
    a = ref_out / "kt" / ref["last_checkpoint"]
    b = run_dir / res["last_checkpoint"]
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert wa.keys() == wb.keys()
    diff = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    base = load_file(str(ASSET_DIR / "model.safetensors"))
    assert any(not torch.equal(base[k], wa[k]) for k in base), "the weights never changed"
    ta = torch.load(a / "trainer_state.pt", weights_only=False)
    tb = torch.load(b / "trainer_state.pt", weights_only=False)
    assert ta["steps"] == tb["steps"] > 0
    sa, sb = ta["optimizer"]["state"], tb["optimizer"]["state"]
    adam = max(float((sa[i][n] - sb[i][n]).abs().max()) for i in sa for n in ("exp_avg", "exp_avg_sq"))
    print(f"max |weight diff| = {diff:.3g}, max |Adam moment diff| = {adam:.3g}")
    assert diff <= 1e-6 and adam <= 1e-6
    assert torch.equal(ta["rng"]["torch"], tb["rng"]["torch"])

    assert res["checkpoint_uri"] == str(store / res["run_id"] / "checkpoints" / "iter-0003")
    assert (Path(res["checkpoint_uri"]) / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert "checkpoint folder not found; fetching the stored copy" in (tmp_path / "resume.log").read_text()

    # MLflow: every metric key has each step once, the reference's steps, the same values.
    ma = mlflow_metrics(ref_out, ref["run_id"])
    mb = mlflow_metrics(kill_out, res["run_id"])
    assert ma.keys() == mb.keys()
    for k, hist in mb.items():
        steps = [s for s, _ in hist]
        assert len(steps) == len(set(steps)), (k, steps)
        assert sorted(steps) == sorted(s for s, _ in ma[k]), (k, steps, ma[k])
        if not k.startswith("time/"):
            want = dict(ma[k])
            assert all(abs(v - want[s]) <= 1e-9 for s, v in hist), (k, hist, ma[k])
    assert sorted(s for s, _ in mb["eval/all/pass_at_1"]) == list(range(ITERATIONS + 1))
    from mlflow.tracking import MlflowClient
    tags = MlflowClient(f"sqlite:///{kill_out}/mlruns/mlflow.db").get_run(res["run_id"]).data.tags
    assert tags["checkpoint.last"] == res["checkpoint_uri"] and tags["checkpoint.iteration"] == str(ITERATIONS)
