"""`selfplay study` end to end, shared by two shard processes on one folder: every (arm, seed)
of the plan runs exactly once, the floor is evaluated, and the report, its table and one MLflow
study run are written once the plan is complete — on a miniature protocol (1 iteration, tiny
batches, a small final evaluation) of the committed toy checkpoint."""

import json
import multiprocessing as mp
from pathlib import Path

import pytest

from selfplay_core.study.protocol import STUDY_COMMON, Arm, FinalEval, Protocol

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SMALL = ("student.real_tasks_per_iteration=2", "student.samples_per_task=4", "student.batch_size=8",
         "updates_per_iteration=1", "eval.n=2", "eval.ks=[1, 2]", "eval.max_problems=4",
         "eval.goalpost_k=2", "engine.max_new_tokens_student=48", "sandbox.workers=1")


def _protocol() -> Protocol:
    return Protocol(
        name="study-shards-test",
        arms=(Arm(name="base", label="start", kind="baseline"),
              Arm(name="rlvr", label="RLVR", config="rlvr-tiny-cpu.yaml", kind="baseline",
                  overrides=SMALL, diagnostics=("student/real/pass_rate",))),
        seeds=(0, 1), iterations=1, common=STUDY_COMMON,
        final=FinalEval(goalpost_k=2, heldout_n=1, ks=(1,), floor_samplings=2, max_new_tokens=48))


def _shard(out: str, k: int, log_path: str) -> None:
    from selfplay_core.study import runner

    lines = []
    rep = runner.run_study(_protocol(), out, configs_dir=ROOT / "configs", shard=(k, 2),
                           log=lines.append, workers=1)
    Path(log_path).write_text(json.dumps({"lines": lines, "complete": rep["complete"]}))


def test_two_shards_share_one_study(tmp_path):
    out = tmp_path / "study"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_shard, args=(str(out), k, str(tmp_path / f"shard{k}.json")))
             for k in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=1800)
        assert p.exitcode == 0

    logs = [json.loads((tmp_path / f"shard{k}.json").read_text()) for k in (1, 2)]
    # The plan is the floor (base s0, s1), then seed-major training runs (rlvr s0, s1); shard k
    # takes entries k-1, k-1+2, ...: shard 1 base s0 + rlvr s0, shard 2 base s1 + rlvr s1.
    ran = [sorted(l.split("]")[0].lstrip("[") for l in log["lines"] if "goalpost hits" in l)
           for log in logs]
    assert ran == [["base seed 0", "rlvr seed 0"], ["base seed 1", "rlvr seed 1"]]
    assert sorted(log["complete"] for log in logs) == [False, True]

    evals = sorted(p.name for p in (out / "evals").iterdir())
    assert evals == ["base-s0.json", "base-s1.json", "rlvr-s0.json", "rlvr-s1.json"]
    saved = json.loads((out / "protocol.json").read_text())
    assert saved["key"] == _protocol().key()
    table = json.loads((out / "table.json").read_text())
    rows = {r["arm"]: r for r in table}
    assert rows["base"]["n"] == 2 and rows["rlvr"]["n"] == 2
    assert (out / "study.md").exists() and (out / "study.png").exists()
    # The arm's diagnostic: the run's one iteration logged student/real/pass_rate (a pass rate).
    for s in (0, 1):
        hist = json.loads((out / "evals" / f"rlvr-s{s}.json").read_text())["diagnostics"]
        assert [step for step, _ in hist["student/real/pass_rate"]] == [1]
        assert 0.0 <= hist["student/real/pass_rate"][0][1] <= 1.0
    assert "`student/real/pass_rate` | 2 |" in (out / "study.md").read_text()

    # One MLflow run per training run (the shards shared the runs' store), one study run.
    from mlflow.tracking import MlflowClient

    runs_uri = f"sqlite:///{out / 'runs' / 'mlruns' / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=runs_uri)
    exp = client.get_experiment_by_name("study-shards-test")
    names = sorted(r.info.run_name for r in client.search_runs([exp.experiment_id]))
    assert names == ["rlvr-s0", "rlvr-s1"]
    assert all(r.info.status == "FINISHED" for r in client.search_runs([exp.experiment_id]))
    study_client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlruns' / 'mlflow.db'}")
    sexp = study_client.get_experiment_by_name("study-shards-test")
    assert [r.info.run_name for r in study_client.search_runs([sexp.experiment_id])] == [
        f"study-{_protocol().key()}"]
