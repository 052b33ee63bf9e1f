"""Acceptance (issue 51): a GASP run of the toy world launched as two gloo ranks on CPU with the
documented command (`torchrun --nproc_per_node 2 -m selfplay_cli.main run`, gpu.distributed:
ddp) runs end to end, through the Prefect flow; its final weights equal a single-process run's up
to float32 reduction order; and only rank 0 wrote: the run folder holds the files the
single-process run's holds, the MLflow store one run, while rank 1 reports the updates it
computed its shard of. And a group whose rank 1 is killed (SIGKILL) in the middle of iteration 2,
resumed with `--resume` under the same launch, ends equal to the uninterrupted group run."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ITERATIONS = 2
UPDATES = 2  # updates_per_iteration: PPO epochs over each batch


def tiny_config(path: Path, model_dir: Path) -> Path:
    cfg = {"iterations": ITERATIONS, "updates_per_iteration": UPDATES, "model": {"path": str(model_dir)},
           "method": {"name": "gasp", "goalposts_per_iteration": 3, "proposals_per_anchor": 2},
           "student": {"samples_per_task": 4, "batch_size": 32},
           "eval": {"n": 2, "ks": [1, 2], "max_problems": 8, "goalpost_every": 1, "goalpost_k": 2,
                    "verdict": False},
           "world": {"goalpost_k": 4, "max_goalposts": 6},
           "engine": {"max_new_tokens_teacher": 192, "max_new_tokens_student": 48},
           "learner": {"lr": 1e-3, "micro_batch_size": 8}, "sandbox": {"workers": 2},
           "tracking": {"run_name": "lg"},
           "gpu": {"device": "cpu", "engine": "hf", "dtype": "float32", "distributed": "ddp",
                   "gradient_checkpointing": False}}
    path.write_text(yaml.safe_dump(cfg))
    return path


def files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def group_cli(*args: str) -> list[str]:
    """The documented launch: two ranks on this machine."""
    return [str(Path(sys.executable).with_name("torchrun")), "--nproc_per_node", "2",
            "-m", "selfplay_cli.main", "run", *args]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The config, the environment, a one-process run and an uninterrupted 2-rank run of it."""
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    tmp = tmp_path_factory.mktemp("group")
    config = tiny_config(tmp / "tiny.yaml", ASSET_DIR)
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env.update(PYTHONPATH=str(ROOT), PREFECT_HOME=str(tmp / "prefect-home"))
    one, two = tmp / "one", tmp / "two"
    r = subprocess.run([sys.executable, "-m", "selfplay_cli.main", "run", "--config", str(config),
                        "--set", f"out_dir={one}", "--no-prefect"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    g = subprocess.run(group_cli("--config", str(config), "--set", f"out_dir={two}"),
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    text = g.stdout + g.stderr
    assert g.returncode == 0, text[-3000:]
    return {"config": config, "env": env, "one": one, "two": two, "text": text, "tmp": tmp}


def test_two_gloo_ranks_run_gasp_like_one_process_and_only_rank_0_writes(runs):
    from mlflow.tracking import MlflowClient
    from safetensors.torch import load_file

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    one, two, text = runs["one"], runs["two"], runs["text"]

    a, b = one / "lg", two / "lg"
    sa, sb = (json.loads((d / "state.json").read_text()) for d in (a, b))
    assert sa["iteration"] == sb["iteration"] == ITERATIONS and sb["finished"]
    # the same run: the loop's decisions did not depend on how the update was computed
    for key in ("buffer", "goalpost_rows", "seed_counter", "id_counter", "last_checkpoint"):
        assert sb[key] == sa[key], key
    wa = load_file(str(a / sa["last_checkpoint"] / "model.safetensors"))
    wb = load_file(str(b / sb["last_checkpoint"] / "model.safetensors"))
    start = load_file(str(ASSET_DIR / "model.safetensors"))
    moved = max(float((wa[k] - start[k]).abs().max()) for k in wa)
    diff = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    print(f"\nlargest weight change {moved:.3g}, largest difference one vs two ranks {diff:.3g}")
    # float32 reduction order only: each AdamW step moves a weight by up to lr = 1e-3, and the
    # two runs differ by a small fraction of one step
    assert moved > 1e-3 and diff < 1e-4
    ta, tb = (torch.load(d / s["last_checkpoint"] / "trainer_state.pt", weights_only=False)
              for d, s in ((a, sa), (b, sb)))
    assert ta["steps"] == tb["steps"]

    # rank 1 computed its shard of every update; it wrote nothing
    m = re.search(r"selfplay learner rank 1 of 2: (\d+) updates, stopped by rank 0", text)
    assert m, text[-3000:]
    assert int(m.group(1)) * UPDATES == tb["steps"]
    assert files_under(b) == files_under(a)
    runs = MlflowClient(f"sqlite:///{two}/mlruns/mlflow.db").search_runs(
        [e.experiment_id for e in MlflowClient(f"sqlite:///{two}/mlruns/mlflow.db").search_experiments()])
    assert [run.info.run_id for run in runs] == [sb["run_id"]]


def rank_pid(launcher: int, rank: int) -> int | None:
    """The pid of torchrun's child with RANK=rank (None until it has started)."""
    kids = Path(f"/proc/{launcher}/task/{launcher}/children")
    for pid in kids.read_text().split() if kids.exists() else []:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env:
            return int(pid)
    return None


def test_killing_rank_1_mid_iteration_then_resuming_equals_the_uninterrupted_group(runs):
    from safetensors.torch import load_file

    out, env, tmp = runs["tmp"] / "killed", runs["env"], runs["tmp"]
    run_dir = out / "lg"
    log = tmp / "killed.log"
    with open(log, "w") as f:
        p = subprocess.Popen(group_cli("--config", str(runs["config"]), "--set", f"out_dir={out}"),
                             stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 480
        while True:  # iteration 1 saved: iteration 2 is under way
            assert p.poll() is None, "the run ended before rank 1 was killed:\n" + log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            state = run_dir / "state.json"
            if state.exists() and json.loads(state.read_text() or "{}").get("iteration") == 1:
                break
            time.sleep(0.02)
        follower = rank_pid(p.pid, 1)
        assert follower is not None
        os.kill(follower, signal.SIGKILL)
        assert p.wait(timeout=300) != 0  # the launcher ends the group when a rank dies
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # what the group left (Prefect server, workers)
        except ProcessLookupError:
            pass
    killed = json.loads((run_dir / "state.json").read_text())
    assert killed["iteration"] == 1 and not killed.get("finished")

    r = subprocess.run(group_cli("--resume", str(run_dir)), capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "selfplay learner rank 1 of 2: 1 updates, stopped by rank 0" in r.stdout + r.stderr

    ref = json.loads((runs["two"] / "lg" / "state.json").read_text())
    res = json.loads((run_dir / "state.json").read_text())
    assert res["run_id"] == killed["run_id"] and res["finished"]
    for key in ("buffer", "goalpost_rows", "goalpost_labels", "rng_state", "seed_counter",
                "id_counter", "last_checkpoint", "metrics_logged_through"):
        assert res[key] == ref[key], key
    a = runs["two"] / "lg" / ref["last_checkpoint"]
    b = run_dir / res["last_checkpoint"]
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    diff = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    ta = torch.load(a / "trainer_state.pt", weights_only=False)
    tb = torch.load(b / "trainer_state.pt", weights_only=False)
    sa, sb = ta["optimizer"]["state"], tb["optimizer"]["state"]
    adam = max(float((sa[i][n] - sb[i][n]).abs().max()) for i in sa for n in ("exp_avg", "exp_avg_sq"))
    print(f"\nkilled and resumed vs uninterrupted group: max |weight diff| {diff:.3g}, "
          f"max |Adam moment diff| {adam:.3g}")
    assert ta["steps"] == tb["steps"] and diff <= 1e-6 and adam <= 1e-6
