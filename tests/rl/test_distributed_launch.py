"""A learner on more than one GPU is refused until the loop is rank-aware (issue 15, failure 6).

Under `accelerate launch --num_processes N` every rank would run the whole loop: each would start
a vLLM server, generate, push weights and write the same run folder. Launched for real (two
torchrun ranks on CPU), both ranks stop with one line before anything starts; the GPU config
refuses learner_gpus > 1 and the distributed layouts; the plan's learner is one process."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from selfplay_core.engines.gpu_config import (QWEN25_CODER, BatchShape, DistributedLaunchError,
                                              GPUConfig, refuse_distributed_launch, resolve_plan)

ROOT = Path(__file__).resolve().parents[2]


def test_accelerate_launch_of_two_ranks_stops_both_before_anything_starts(tmp_path):
    accelerate = Path(sys.executable).with_name("accelerate")
    assert accelerate.exists() or shutil.which("accelerate"), "accelerate's CLI is installed with the project"
    out = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [str(accelerate if accelerate.exists() else shutil.which("accelerate")), "launch",
         "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
         "--dynamo_backend", "no", "-m", "selfplay_cli.main", "run", "--dry-run",
         "--set", f"out_dir={out}"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-3000:]
    # one line per rank that got to speak (torchrun sends SIGTERM to the other rank as soon as
    # the first one exits, so the second line may not make it)
    ours = [line for line in text.splitlines() if line.startswith("selfplay run: error:")]
    assert ours, text[-3000:]
    for line in ours:
        assert "rank" in line and "of 2 (WORLD_SIZE=2)" in line
        assert "a multi-GPU learner is not implemented" in line
    assert "exitcode: 2" in text  # the rank's own exit status: a clean refusal, not a crash
    assert "resolved plan" not in proc.stdout and "method:" not in proc.stdout  # no plan printed
    assert not out.exists()


def test_the_library_entry_refuses_a_rank_too(monkeypatch, tmp_path):
    from selfplay_core.config import load_config
    from selfplay_core.loop.context import build_context

    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(DistributedLaunchError, match="rank 3 of 4"):
        build_context(load_config(None, []), tmp_path / "ctx")
    assert not (tmp_path / "ctx").exists()
    refuse_distributed_launch({"WORLD_SIZE": "1"})  # a single-process launch is fine
    refuse_distributed_launch({})


@pytest.mark.parametrize("kw", [dict(learner_gpus=2, num_gpus=2, distributed="ddp"),
                                dict(learner_gpus=4, num_gpus=4, distributed="fsdp"),
                                dict(learner_gpus=2, num_gpus=2),
                                dict(distributed="zero3")])
def test_multi_gpu_learner_settings_are_refused(kw):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="multi-GPU learner is not implemented"):
        GPUConfig(engine="hf", **kw)


def test_the_plan_describes_the_one_learner_process_that_runs():
    gpu = GPUConfig(engine="vllm", launch_server=True, num_gpus=3, rollout_gpus=2,
                    tensor_parallel_size=2)
    plan = resolve_plan(gpu, QWEN25_CODER["7b"], BatchShape())
    learner = [p for p in plan.processes if p["name"] == "learner"]
    assert len(learner) == 1 and learner[0]["gpus"] == [0]
    assert "accelerate launch" not in plan.render()
    assert plan.batch["rollouts_per_learner_gpu"] == plan.batch["rollouts_per_step"] == 512
    assert plan.batch["micro_batches_per_gpu"] == 512 // 4
