"""Acceptance (issue 51): a GASP run of the toy world launched as two gloo ranks on CPU with the
documented command (`torchrun --nproc_per_node 2 -m selfplay_cli.main run`, gpu.distributed:
ddp) runs end to end, through the Prefect flow; its final weights equal a single-process run's up
to float32 reduction order; and only rank 0 wrote: the run folder holds the files the
single-process run's holds, the MLflow store one run, while rank 1 reports the updates it
computed its shard of."""

import json
import os
import re
import subprocess
import sys
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


def test_two_gloo_ranks_run_gasp_like_one_process_and_only_rank_0_writes(tmp_path):
    from mlflow.tracking import MlflowClient
    from safetensors.torch import load_file

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    config = tiny_config(tmp_path / "tiny.yaml", ASSET_DIR)
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env.update(PYTHONPATH=str(ROOT), PREFECT_HOME=str(tmp_path / "prefect-home"))
    one, two = tmp_path / "one", tmp_path / "two"
    r = subprocess.run([sys.executable, "-m", "selfplay_cli.main", "run", "--config", str(config),
                        "--set", f"out_dir={one}", "--no-prefect"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    torchrun = Path(sys.executable).with_name("torchrun")
    g = subprocess.run([str(torchrun), "--nproc_per_node", "2", "-m", "selfplay_cli.main", "run",
                        "--config", str(config), "--set", f"out_dir={two}"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    text = g.stdout + g.stderr
    assert g.returncode == 0, text[-3000:]

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
