"""Acceptance: SIGINT and SIGTERM end a real `selfplay run` cleanly, and the run resumes to the
same end as an uninterrupted one.

One run (through the CLI's default, the Prefect flow, with its temporary Prefect server) is
stopped twice: by SIGINT to its whole process group during iteration 1, as Ctrl-C in a terminal
sends it (the temporary server and the sandbox workers get it too), then, resumed, by SIGTERM
to the CLI process alone during iteration 2, as a process manager sends it. Each stop exits with
128 + the signal's number, prints the `selfplay run --resume RUN_DIR` line and no traceback,
leaves the last complete iteration's state and marks the MLflow run KILLED. The second resume
runs to the end, which must equal a run of the same config that was never stopped (run without
Prefect: both paths compute the same run, tests/resume/test_resume_kill.py).
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli_runs import ROOT, cli, cli_env, run_to_end, tiny_config

pytestmark = pytest.mark.slow

ITERATIONS = 2


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    # The CLI's temporary server, whose Ctrl-C this test sends.
    return cli_env(tmp_path_factory.mktemp("prefect-home"), temporary_server=True)


def stop_when(args: list[str], env: dict, log: Path, ready, sig: int, group: bool) -> int:
    """Start the run, wait until `ready(log text)`, send `sig` (to its process group, or to the
    CLI process alone), return its exit status."""
    with open(log, "w") as f:
        p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 480
        while not ready(log.read_text(errors="replace")):
            assert p.poll() is None, "the run ended before it was stopped:\n" + log.read_text()[-3000:]
            assert time.monotonic() < deadline, "never got there:\n" + log.read_text()[-3000:]
            time.sleep(0.05)
        (os.killpg if group else os.kill)(p.pid, sig)
        return p.wait(timeout=240)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


def after(marker: str, then: str):
    def ready(text: str) -> bool:
        k = text.find(marker)
        return k != -1 and then in text[k + len(marker):]
    return ready


def mlflow_status(out_dir: Path, run_id: str) -> str:
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{out_dir}/mlruns/mlflow.db").get_run(run_id).info.status


def assert_stopped_cleanly(rc: int, sig: int, log: Path, run_dir: Path, out_dir: Path, iteration: int):
    text = log.read_text(errors="replace")
    assert rc == 128 + sig, text[-3000:]
    assert "Traceback" not in text and "Crash detected" not in text, text[-5000:]
    name = signal.Signals(sig).name
    assert (f"{name}: the run stopped after {iteration} of {ITERATIONS} iterations; resume with: "
            f"selfplay run --resume {run_dir}") in text, text[-3000:]
    state = json.loads((run_dir / "state.json").read_text())
    assert state["iteration"] == iteration and state["metrics_logged_through"] == iteration
    assert not state["finished"]
    assert mlflow_status(out_dir, state["run_id"]) == "KILLED"


def test_sigint_and_sigterm_stop_cleanly_and_the_resumed_run_equals_an_uninterrupted_one(tmp_path, env):
    from safetensors.torch import load_file

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    config = tiny_config(tmp_path / "tiny.yaml", ASSET_DIR, iterations=ITERATIONS, run_name="it",
                         verdict=False)
    ref_out, out = tmp_path / "ref", tmp_path / "stopped"
    run_dir = (out / "it").resolve()
    run_to_end(cli("--config", str(config), "--set", f"out_dir={ref_out}", "--no-prefect"), env,
               tmp_path / "ref.log")

    # Ctrl-C during iteration 1 (after its first stage started).
    rc = stop_when(cli("--config", str(config), "--set", f"out_dir={out}"), env, tmp_path / "int.log",
                   after("Task run 'goalposts", "Task run 'propose_lemma"), signal.SIGINT, group=True)
    assert_stopped_cleanly(rc, signal.SIGINT, tmp_path / "int.log", run_dir, out, iteration=0)

    # Resumed, then SIGTERM during iteration 2.
    rc = stop_when(cli("--resume", str(run_dir)), env, tmp_path / "term.log",
                   after("iteration 1:", "Task run 'propose_lemma"), signal.SIGTERM, group=False)
    assert_stopped_cleanly(rc, signal.SIGTERM, tmp_path / "term.log", run_dir, out, iteration=1)

    run_to_end(cli("--resume", str(run_dir)), env, tmp_path / "resume.log")

    ref = json.loads((ref_out / "it" / "state.json").read_text())
    res = json.loads((run_dir / "state.json").read_text())
    assert res["iteration"] == ref["iteration"] == ITERATIONS and res["finished"]
    for key in ("buffer", "goalpost_ids", "goalpost_rows", "goalpost_labels", "rng_state", "seed_counter",
                "id_counter", "real_cursor", "metrics_logged_through"):
        assert res[key] == ref[key], key
    assert len(ref["buffer"]) > 0

    def untimed(history):
        return [{k: v for k, v in h.items() if not k.startswith("time/")} for h in history]
    assert untimed(res["history"]) == untimed(ref["history"])
    wa = load_file(str(ref_out / "it" / ref["last_checkpoint"] / "model.safetensors"))
    wb = load_file(str(run_dir / res["last_checkpoint"] / "model.safetensors"))
    assert wa.keys() == wb.keys()
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) <= 1e-6
    assert mlflow_status(out, res["run_id"]) == "FINISHED"
