"""A multi-process launch of a config that does not ask for a learner group is refused (issue 15,
failure 6; issue 51 made the group possible with gpu.distributed: ddp).

Under `accelerate launch --num_processes N` every rank of such a config would run the whole loop:
each would start a vLLM server, generate, push weights and write the same run folder. Launched
for real (two ranks on CPU), both ranks stop with one line before anything starts; the GPU config
refuses learner_gpus > 1 without ddp, and the sharded layouts it does not implement."""

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
        assert "needs gpu.distributed: ddp in the config" in line
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


def test_a_launch_is_accepted_when_the_config_asks_for_a_learner_group():
    two = {"WORLD_SIZE": "2", "RANK": "1"}
    refuse_distributed_launch(two, GPUConfig(device="cpu", engine="hf", dtype="float32",
                                             distributed="ddp"))
    ddp4 = GPUConfig(engine="hf", num_gpus=4, learner_gpus=4, distributed="ddp")
    refuse_distributed_launch({"WORLD_SIZE": "4"}, ddp4)
    with pytest.raises(DistributedLaunchError, match="torchrun --nproc_per_node 4"):
        refuse_distributed_launch(two, ddp4)  # one rank per learner GPU
    with pytest.raises(DistributedLaunchError, match="needs gpu.distributed: ddp"):
        refuse_distributed_launch(two, GPUConfig(engine="hf", num_gpus=2))
    with pytest.raises(DistributedLaunchError, match="needs gpu.distributed: ddp"):  # MPI: not ours
        refuse_distributed_launch({"OMPI_COMM_WORLD_SIZE": "2"}, ddp4)


@pytest.mark.parametrize("kw,message", [
    (dict(learner_gpus=4, num_gpus=4, distributed="fsdp"), "'fsdp' is not implemented"),
    (dict(distributed="zero3"), "'zero3' is not implemented"),
    (dict(learner_gpus=2, num_gpus=2), "learner_gpus=2 needs distributed: ddp"),
    (dict(learner_gpus=2, num_gpus=2, distributed="ddp", precision="amp"), "precision 'amp'"),
    (dict(device="cpu", dtype="float32", distributed="fsdp"), "'fsdp' is not implemented"),
    (dict(device="cpu", dtype="float32", learner_gpus=2, distributed="ddp"), "--nproc_per_node"),
])
def test_learner_layouts_that_do_not_run_are_refused(kw, message):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=message):
        GPUConfig(engine="hf", **kw)
    GPUConfig(engine="hf", learner_gpus=2, num_gpus=2, distributed="ddp")  # the one that runs


def test_the_plan_of_one_learner_gpu_has_one_learner_process():
    gpu = GPUConfig(engine="vllm", launch_server=True, num_gpus=3, rollout_gpus=2,
                    tensor_parallel_size=2)
    plan = resolve_plan(gpu, QWEN25_CODER["7b"], BatchShape())
    learner = [p for p in plan.processes if p["name"] == "learner"]
    assert len(learner) == 1 and learner[0]["gpus"] == [0]
    assert "learner_if_fsdp" not in plan.memory
    assert plan.batch["rollouts_per_learner_gpu"] == plan.batch["rollouts_per_step"] == 512
    assert plan.batch["micro_batches_per_gpu"] == 512 // 4


def test_8gpu_recipe_dry_run_prints_the_placement_and_the_memory_plan_per_gpu():
    """The numbers, by hand from Qwen2.5-Coder-7B's config.json (h 3584, 28 layers, 28 heads, 4 KV
    heads of 128, intermediate 18944, vocabulary 152064, untied head, q/k/v biases)."""
    h, layers, kv, inter, vocab = 3584, 28, 4 * 128, 18944, 152064
    layer = 2 * h * h + 2 * h * kv + 3 * h * inter + (h + 2 * kv) + 2 * h   # 233,057,792
    params = layers * layer + 2 * vocab * h + h                             # 7,615,616,512
    gib = 2 ** 30
    ddp = {"weights": 2 * params / gib, "grads": 2 * params / gib, "optimizer": 4 * params / gib}
    fsdp = {k: v / 4 for k, v in ddp.items()}
    fsdp["gathered"] = 2 * max(layer, vocab * h) * 2 / gib  # the embedding unit, weights + grad
    tokens = 4 * 2048                                        # micro-batch 4 x (1024 + 1024)
    activations = (layers * tokens * h * 2 + tokens * (6 * h + 2 * kv + 4 * inter) * 2) / gib
    logits = (1024 * vocab * (8 + 2) + vocab * h * 2) / gib
    kv_cache = 0.9 * 80 - 2 * params / gib - 2.0

    r = subprocess.run([sys.executable, "-m", "selfplay_cli.main", "run", "--config",
                        "configs/gpu/qwen2.5-coder-7b-8gpu.yaml", "--dry-run"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120,
                       env={**{k: v for k, v in os.environ.items() if k != "WORLD_SIZE"},
                            "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "gpus: total=8, learner=[0, 1, 2, 3], rollout=[4, 5, 6, 7], tensor_parallel=1, idle=0" in out
    for rank, gpu in enumerate(range(4)):
        assert f"  - learner-rank-{rank}: " in out and f"(GPUs [{gpu}])" in out
    for server, gpu in enumerate(range(4, 8)):
        assert f"  - vllm-server-{server}: `selfplay vllm-serve`" in out and f"(GPUs [{gpu}])" in out
    assert "rollouts_per_step=512, rollouts_per_learner_gpu=128, micro_batches_per_gpu=32" in out

    def line(role):
        [text] = [x for x in out.splitlines() if x.startswith(f"memory per {role} GPU (GiB): ")]
        return dict(kv.split("=") for kv in text.split(": ", 1)[1].split(", "))
    learner, sharded, rollout = line("learner"), line("learner_if_fsdp"), line("rollout")
    for k, v in ddp.items():
        assert learner[k] == f"{v:.2f}", k
    for k, v in fsdp.items():
        assert sharded[k] == f"{v:.2f}", k
    assert learner["activations"] == sharded["activations"] == f"{activations:.2f}"
    assert learner["logits"] == f"{logits:.2f}"
    assert learner["total"] == f"{sum(ddp.values()) + activations + logits:.2f}"
    assert sharded["total"] == f"{sum(fsdp.values()) + activations + logits:.2f}"
    assert rollout["weights"] == f"{2 * params / gib:.2f}" and rollout["kv_cache"] == f"{kv_cache:.2f}"
    assert rollout["kv_bytes_per_token"] == f"{2 * layers * 4 * 128 * 2:.2f}"
    assert "fits: yes" in out
