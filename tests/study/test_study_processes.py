"""`selfplay study` end to end, shared by two processes on one folder: every (arm, seed) of the
plan runs exactly once, the floor is evaluated, and the report, its table and one MLflow study
run are written once the plan is complete — on a miniature protocol (1 iteration, tiny batches,
a small final evaluation) of the committed toy checkpoint. And the claim files that share the
runs: a live process's claim is respected, a dead one's taken over."""

import json
import multiprocessing as mp
from pathlib import Path

import pytest

from selfplay_study.protocol import STUDY_COMMON, Arm, FinalEval, Protocol

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SMALL = ("student.real_tasks_per_iteration=2", "student.samples_per_task=4", "student.batch_size=8",
         "updates_per_iteration=1", "eval.n=2", "eval.verdict_n=null", "eval.ks=[1, 2]", "eval.max_problems=4",
         "eval.goalpost_k=2", "engine.max_new_tokens_student=48", "sandbox.workers=1")


def _protocol() -> Protocol:
    return Protocol(
        name="study-processes-test",
        arms=(Arm(name="base", label="start", kind="baseline"),
              Arm(name="rlvr+x", label="RLVR", config="rlvr-tiny-cpu.yaml", kind="baseline",
                  overrides=SMALL, diagnostics=("student/real/pass_rate",))),
        seeds=(0, 1), iterations=1, common=STUDY_COMMON,
        final=FinalEval(goalpost_k=2, heldout_n=1, ks=(1,), floor_samplings=2, max_new_tokens=48))


def _study(out: str, log_path: str) -> None:
    from selfplay_study import runner

    lines = []
    rep = runner.run_study(_protocol(), out, configs_dir=ROOT / "configs", log=lines.append, workers=1)
    Path(log_path).write_text(json.dumps({"lines": lines, "complete": rep["complete"]}))


def test_two_processes_share_one_study(tmp_path):
    out = tmp_path / "study"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_study, args=(str(out), str(tmp_path / f"proc{k}.json")))
             for k in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=1800)
        assert p.exitcode == 0

    logs = [json.loads((tmp_path / f"proc{k}.json").read_text()) for k in (1, 2)]
    # Each run of the plan (floor base s0, s1; rlvr s0, s1) was run by exactly one process.
    ran = [[l.split("]")[0].lstrip("[") for l in log["lines"] if "goalpost hits" in l] for log in logs]
    assert sorted(ran[0] + ran[1]) == ["base seed 0", "base seed 1", "rlvr+x seed 0", "rlvr+x seed 1"]
    # The last to finish found the plan complete and wrote the report; the other may have too.
    assert any(log["complete"] for log in logs)
    assert not list((out / "claims").iterdir())

    evals = sorted(p.name for p in (out / "evals").iterdir())
    assert evals == ["base-s0.json", "base-s1.json", "rlvr+x-s0.json", "rlvr+x-s1.json"]
    saved = json.loads((out / "protocol.json").read_text())
    assert saved["key"] == _protocol().key()
    table = json.loads((out / "table.json").read_text())
    rows = {r["arm"]: r for r in table}
    assert rows["base"]["n"] == 2 and rows["rlvr+x"]["n"] == 2
    assert (out / "study.md").exists() and (out / "study.png").exists()
    # The arm's diagnostic: the run's one iteration logged student/real/pass_rate (a pass rate).
    for s in (0, 1):
        hist = json.loads((out / "evals" / f"rlvr+x-s{s}.json").read_text())["diagnostics"]
        assert [step for step, _ in hist["student/real/pass_rate"]] == [1]
        assert 0.0 <= hist["student/real/pass_rate"][0][1] <= 1.0
    assert "`student/real/pass_rate` | 2 |" in (out / "study.md").read_text()

    # One MLflow run per training run (the processes shared the runs' store), one study run.
    from mlflow.tracking import MlflowClient

    runs_uri = f"sqlite:///{out / 'runs' / 'mlruns' / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=runs_uri)
    exp = client.get_experiment_by_name("study-processes-test")
    names = sorted(r.info.run_name for r in client.search_runs([exp.experiment_id]))
    assert names == ["rlvr+x-s0", "rlvr+x-s1"]
    assert all(r.info.status == "FINISHED" for r in client.search_runs([exp.experiment_id]))
    study_client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlruns' / 'mlflow.db'}")
    sexp = study_client.get_experiment_by_name("study-processes-test")
    [srun] = study_client.search_runs([sexp.experiment_id])
    assert srun.info.run_name == f"study-{_protocol().key()}"
    # An arm name MLflow keys do not allow ('+') is spelled out in the study run's metrics.
    assert srun.data.metrics["rlvr_plus_x/goalposts/union"] == rows["rlvr+x"]["goalposts/union"]


def test_claims_respect_the_living_and_take_over_from_the_dead(tmp_path):
    import os
    import socket
    import subprocess
    import sys

    from selfplay_study.runner import claim

    mine = claim(tmp_path, "rlvr-s0")
    assert mine is not None and mine.read_text() == f"{socket.gethostname()} {os.getpid()}"
    # A claim of a live process on this host (here: a sleeping child) is not taken ...
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "claims" / "gasp-s0.claim").write_text(f"{socket.gethostname()} {child.pid}")
        assert claim(tmp_path, "gasp-s0") is None
    finally:
        child.kill()
        child.wait()
    # ... once it is gone, the claim is stale and taken over.
    taken = claim(tmp_path, "gasp-s0")
    assert taken is not None and taken.read_text().endswith(f" {os.getpid()}")
    # Another host's claim cannot be checked from here: respected.
    (tmp_path / "claims" / "azr-s0.claim").write_text(f"not-{socket.gethostname()} 1")
    assert claim(tmp_path, "azr-s0") is None
    # A half-written claim (a process died between create and write) is stale.
    (tmp_path / "claims" / "star-s0.claim").write_text("")
    assert claim(tmp_path, "star-s0") is not None
