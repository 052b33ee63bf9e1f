"""GPU deployment settings (validated once at start-up) and the resolved plan for `--dry-run`.

`GPUConfig` says where generation and learning run: engine backend, vLLM server URL or a
server launched by the run (on its own GPUs, or colocated with the learner using sleep mode), GPUs
per role, tensor parallelism, memory share, dtype and precision, LoRA, gradient checkpointing.
Impossible combinations fail here with one clear message instead of minutes into a run. A learner
on several GPUs (or CPU processes) is a group of ranks started by torchrun with `distributed: ddp`
(rl/distributed.py): rank 0 runs the loop, the others only learn; `fsdp` and `zero3` are not
implemented (`NOT_IMPLEMENTED_SHARDING`).

`resolve_plan(gpu, model, batch)` turns it into what will actually happen — processes, GPUs per
role, batch shapes per device, expected memory per GPU — for a model shape (`ModelShape`, with the
Qwen2.5-Coder shapes built in). Memory is an estimate with the formula spelled out in
`learner_memory` / `rollout_memory`; it is meant to catch "cannot fit" before a run, not to
replace measuring (tools/gpu_check.py measures).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field, model_validator

from selfplay_core.frozen import FrozenConfig

GIB = float(1 << 30)
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# The ranks vLLM accepts for --max-lora-rank (vllm/config/lora.py, 0.2x-0.3x).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_lora_rank(r: int) -> int:
    """The smallest rank vLLM accepts as --max-lora-rank that holds an adapter of rank `r`."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= r:
            return allowed
    raise ValueError(f"LoRA rank {r} exceeds vLLM's largest max_lora_rank {VLLM_LORA_RANKS[-1]}")


class LoraSettings(FrozenConfig):
    r: int = Field(16, ge=1, le=VLLM_LORA_RANKS[-1])  # a vLLM server loads up to rank 512
    # LoRA scaling numerator (the update is scaled by alpha / r).
    alpha: int = Field(32, ge=1)
    # Dropout on the LoRA branch.
    dropout: float = Field(0.0, ge=0, lt=1)
    # Module names that get LoRA adapters.
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj",
                                       "gate_proj", "up_proj", "down_proj")


MULTI_GPU_LEARNER = (
    "a learner on several processes needs gpu.distributed: ddp in the config (rank 0 then runs "
    "the loop and the other ranks only learn); without it every rank would run the whole loop, "
    "start a vLLM server and write the run folder")
NOT_IMPLEMENTED_SHARDING = (
    "is not implemented: the multi-process learner replicates the weights (distributed: ddp); "
    "a 7B full fine-tune fits each 80 GB GPU with precision 'pure', or train a LoRA adapter")


# set for every rank by torchrun / accelerate launch / deepspeed / mpirun
_LAUNCHER_WORLD_SIZE = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def launched_rank(environ=None) -> tuple[int, int, int] | None:
    """(rank, world size, local rank) when this process is one of several ranks that torchrun /
    accelerate launch started; None for a single process."""
    environ = os.environ if environ is None else environ
    world = environ.get("WORLD_SIZE", "")
    if not (world.isdigit() and int(world) > 1):
        return None
    return (int(environ.get("RANK", "0")), int(world), int(environ.get("LOCAL_RANK", "0")))


class DistributedLaunchError(RuntimeError):
    """The run was started as one of several ranks, and its config does not ask for that."""


def refuse_distributed_launch(environ=None, gpu: "GPUConfig | None" = None) -> None:
    """Stop before anything starts when this process is one rank of a multi-process launch
    (`accelerate launch --num_processes N`, torchrun) and the config `gpu` does not ask for a
    multi-process learner (distributed: ddp): every rank would run the whole loop, start its
    own vLLM server and push weights. With ddp only torchrun's variables are understood (an MPI
    launch is still refused), and on CUDA the group must have learner_gpus ranks."""
    environ = os.environ if environ is None else environ
    for key in _LAUNCHER_WORLD_SIZE:
        value = environ.get(key, "")
        if value.isdigit() and int(value) > 1:
            rank = environ.get("RANK", environ.get("LOCAL_RANK", "?"))
            if gpu is not None and gpu.distributed == "ddp" and key == "WORLD_SIZE":
                if gpu.device == "cuda" and int(value) != gpu.learner_gpus:
                    raise DistributedLaunchError(
                        f"started as {value} ranks but gpu.learner_gpus is {gpu.learner_gpus}: "
                        f"launch `torchrun --nproc_per_node {gpu.learner_gpus}` (one rank per "
                        "learner GPU)")
                return
            raise DistributedLaunchError(
                f"started as rank {rank} of {value} ({key}={value}): {MULTI_GPU_LEARNER}. Set it "
                "(see docs/gpu.md), or start the run as one process (`selfplay run ...`)")


class GPUConfig(FrozenConfig):
    """Where generation and learning run. Frozen; unknown keys are an error."""

    # Where the learner runs.
    device: Literal["cuda", "cpu"] = "cuda"
    # Rollout engine: vllm servers, or hf generate in the learner's process.
    engine: Literal["hf", "vllm"] = "vllm"
    # server: vLLM on GPUs of its own; colocated: a vLLM server on the learner's GPUs that
    # sleeps (weights to CPU, KV cache dropped) while the learner steps.
    vllm_placement: Literal["server", "colocated"] = "server"
    # A vLLM server already running (None: launch_server, or the plan's own).
    server_url: str | None = None
    launch_server: bool = False           # the run starts `selfplay vllm-serve` itself
    # auto: engines/weight_sync.choose_transport (ipc colocated, nccl where TRL's client runs,
    # lora for a LoRA learner, else filesystem); the plan prints the choice and why.
    weight_sync: Literal["auto", "nccl", "ipc", "filesystem", "lora", "none"] = "auto"
    # GPUs the run may use in all.
    num_gpus: int = Field(1, ge=0)
    # GPUs the learner trains on.
    learner_gpus: int = Field(1, ge=0)
    rollout_gpus: int = Field(0, ge=0)    # server placement only
    # GPUs each vLLM server shards the model over.
    tensor_parallel_size: int = Field(1, ge=1)
    # vLLM's share of each of its GPUs. None: 0.9 on GPUs of its own; colocated, the share the
    # learner's steady state leaves (weights + AdamW states, after the step's cache is released).
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    # Longest prompt + completion a server accepts, in tokens (sizes its KV cache).
    max_model_len: int = Field(4096, ge=16)
    # Weights' dtype on GPU.
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    # How a bf16 model keeps updates of lr 1e-6 that round-to-nearest would lose (rl/optim.py):
    # pure: weights, grads and AdamW moments in `dtype`, written with stochastic rounding
    #       (8 bytes per parameter: what fits a 7B full fine-tune on one 80 GB GPU);
    # kahan: as pure plus a bf16 compensation buffer (10 bytes, deterministic);
    # master: `dtype` weights and grads, float32 master weights and moments (16 bytes, exact);
    # amp: float32 weights with autocast to `dtype` (16 bytes).
    precision: Literal["pure", "kahan", "master", "amp"] = "pure"
    # How a learner spread over several GPUs shards its work (none: one process).
    distributed: Literal["none", "ddp", "zero3", "fsdp"] = "none"
    # Recompute activations in the backward pass (less memory, ~30 % more compute).
    gradient_checkpointing: bool = True
    # Train LoRA adapters instead of every weight (None: full fine-tune).
    lora: LoraSettings | None = None
    gpu_memory_gib: float = Field(80.0, gt=0, description="memory of one GPU, for the plan")

    @property
    def server_replicas(self) -> int:
        """Data-parallel vLLM servers of the plan: rollout_gpus / tensor_parallel_size (one for
        a colocated server)."""
        if self.engine != "vllm" or self.vllm_placement == "colocated" or not self.rollout_gpus:
            return 1
        return self.rollout_gpus // self.tensor_parallel_size

    @model_validator(mode="after")
    def _check(self) -> "GPUConfig":
        def fail(msg: str):
            raise ValueError(msg)

        if self.device == "cpu":
            if self.engine == "vllm":
                fail("engine 'vllm' needs CUDA GPUs; on CPU use engine 'hf'")
            if self.dtype != "float32":
                fail(f"dtype {self.dtype} on CPU: use float32 (CPU matmuls in {self.dtype} "
                     "are slow and the CPU path is tested in float32)")
            if self.distributed in ("fsdp", "zero3"):
                fail(f"distributed '{self.distributed}' {NOT_IMPLEMENTED_SHARDING}")
            if self.learner_gpus > 1:
                fail("learner_gpus counts GPUs; on CPU the learner group has as many ranks as "
                     "torchrun starts (--nproc_per_node): leave learner_gpus at 1")
            return self
        if self.num_gpus < 1:
            fail("device 'cuda' needs num_gpus >= 1")
        if self.learner_gpus < 1:
            fail("learner_gpus must be at least 1 on cuda")
        if self.dtype == "float16" and self.precision in ("pure", "kahan", "master"):
            fail(f"float16 weights with precision '{self.precision}' overflow; use dtype "
                 "bfloat16, or precision 'amp'")
        if self.distributed in ("fsdp", "zero3"):
            fail(f"distributed '{self.distributed}' {NOT_IMPLEMENTED_SHARDING}")
        if self.learner_gpus > 1 and self.distributed == "none":
            fail(f"learner_gpus={self.learner_gpus} needs distributed: ddp (and a launch with "
                 f"`torchrun --nproc_per_node {self.learner_gpus}`), or learner_gpus: 1")
        if self.distributed != "none":
            if self.precision == "amp":
                fail("precision 'amp' with a multi-process learner is not supported (its "
                     "autocast comes from accelerate's prepare, which the group does not use): "
                     "use 'pure', 'kahan' or 'master'")
            if self.engine == "vllm" and self.vllm_placement == "colocated":
                fail("a colocated vLLM server shares one learner GPU; a multi-process learner "
                     "needs vllm_placement 'server' on GPUs of its own")
        if self.weight_sync == "lora" and self.lora is None:
            fail("weight_sync 'lora' needs lora settings (the learner must train a LoRA adapter)")
        if self.weight_sync == "ipc" and (self.engine != "vllm" or self.vllm_placement != "colocated"
                                          or self.learner_gpus != 1):
            fail("weight_sync 'ipc' hands the learner's GPU tensors to a vLLM server on the same "
                 "GPU: it needs engine vllm, vllm_placement 'colocated' and learner_gpus 1 "
                 "(a server on other GPUs: nccl or filesystem)")
        if self.engine == "hf":
            if self.rollout_gpus:
                fail("rollout_gpus is for engine 'vllm'; the hf engine generates on the "
                     "learner's GPUs")
            if self.learner_gpus > self.num_gpus:
                fail(f"learner_gpus={self.learner_gpus} exceeds num_gpus={self.num_gpus}")
            return self
        # ---- vllm ----
        if self.server_url is None and not self.launch_server:
            fail("vllm server URL missing: set server_url (a running `selfplay vllm-serve`) "
                 "or launch_server: true")
        if self.server_url is not None and not self.server_url.startswith(("http://", "https://")):
            fail(f"server_url must look like http://HOST:PORT, got {self.server_url!r}")
        tp = self.tensor_parallel_size
        if self.vllm_placement == "colocated":
            if self.rollout_gpus:
                fail("colocated vLLM shares the learner's GPUs: leave rollout_gpus at 0")
            if self.learner_gpus > self.num_gpus:
                fail(f"learner_gpus={self.learner_gpus} exceeds num_gpus={self.num_gpus}")
            if self.learner_gpus % tp:
                fail(f"tensor_parallel_size={tp} does not divide the {self.learner_gpus} "
                     "colocated GPUs")
            if self.learner_gpus != tp:
                fail(f"colocated: the engine drives one server, so tensor_parallel_size must "
                     f"equal learner_gpus ({self.learner_gpus})")
            return self
        if self.launch_server:
            if self.rollout_gpus < 1:
                fail("launch_server needs rollout_gpus >= 1 (the GPUs the vLLM server gets)")
            if self.learner_gpus + self.rollout_gpus > self.num_gpus:
                fail(f"learner_gpus ({self.learner_gpus}) + rollout_gpus ({self.rollout_gpus}) "
                     f"exceed num_gpus ({self.num_gpus})")
        if self.rollout_gpus:
            if self.rollout_gpus % tp:
                fail(f"tensor_parallel_size={tp} does not divide rollout_gpus="
                     f"{self.rollout_gpus}")

        if self.learner_gpus > self.num_gpus:
            fail(f"learner_gpus={self.learner_gpus} exceeds num_gpus={self.num_gpus}")
        return self


# ---- model shapes --------------------------------------------------------------------------------
class ModelShape(FrozenConfig):
    """The numbers that decide parameter count, FLOPs and memory of a Qwen2/Llama-class model."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    qkv_bias: bool = True  # Qwen2 has biases on q, k, v

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each projection in one layer, by peft target-module name."""
        h, kv, i = self.hidden_size, self.kv_dim, self.intermediate_size
        return {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def num_params(self) -> int:
        h = self.hidden_size
        per_layer = sum(a * b for a, b in self.linear_shapes().values())
        if self.qkv_bias:
            per_layer += h + 2 * self.kv_dim
        per_layer += 2 * h  # input and post-attention RMSNorm
        embed = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return embed + head + self.num_layers * per_layer + h  # + final norm

    def lora_params(self, lora: LoraSettings) -> int:
        shapes = self.linear_shapes()
        unknown = [m for m in lora.target_modules if m not in shapes]
        if unknown:
            raise ValueError(f"lora target_modules {unknown} are not projections of this model "
                             f"({sorted(shapes)})")
        return self.num_layers * sum(lora.r * (shapes[m][0] + shapes[m][1])
                                     for m in lora.target_modules)

    def hf_config_kwargs(self) -> dict:
        """Keyword arguments for `transformers.Qwen2Config` (random init, no download)."""
        return dict(hidden_size=self.hidden_size, num_hidden_layers=self.num_layers,
                    num_attention_heads=self.num_heads, num_key_value_heads=self.num_kv_heads,
                    intermediate_size=self.intermediate_size, vocab_size=self.vocab_size,
                    tie_word_embeddings=self.tie_word_embeddings, max_position_embeddings=32768,
                    rope_theta=1000000.0, rms_norm_eps=1e-6)

    @classmethod
    def from_hf_config(cls, cfg, name: str = "model") -> "ModelShape":
        get = cfg.get if isinstance(cfg, dict) else (lambda k, d=None: getattr(cfg, k, d))
        return cls(name=name, hidden_size=get("hidden_size"), num_layers=get("num_hidden_layers"),
                   num_heads=get("num_attention_heads"),
                   num_kv_heads=get("num_key_value_heads") or get("num_attention_heads"),
                   intermediate_size=get("intermediate_size"), vocab_size=get("vocab_size"),
                   tie_word_embeddings=bool(get("tie_word_embeddings", False)),
                   qkv_bias=get("model_type", "qwen2") == "qwen2")


# From the public config.json files of Qwen/Qwen2.5-Coder-{0.5B,1.5B,7B}(-Instruct). The 0.5B and
# 1.5B models tie input and output embeddings and use a 151936-entry vocabulary; the 7B model does
# not tie them and pads its vocabulary to 152064.
QWEN25_CODER = {
    "0.5b": ModelShape(name="Qwen2.5-Coder-0.5B", hidden_size=896, num_layers=24, num_heads=14,
                       num_kv_heads=2, intermediate_size=4864, vocab_size=151936,
                       tie_word_embeddings=True),
    "1.5b": ModelShape(name="Qwen2.5-Coder-1.5B", hidden_size=1536, num_layers=28, num_heads=12,
                       num_kv_heads=2, intermediate_size=8960, vocab_size=151936,
                       tie_word_embeddings=True),
    "7b": ModelShape(name="Qwen2.5-Coder-7B", hidden_size=3584, num_layers=28, num_heads=28,
                     num_kv_heads=4, intermediate_size=18944, vocab_size=152064,
                     tie_word_embeddings=False),
}


class BatchShape(FrozenConfig):
    prompts_per_step: int = Field(64, ge=1)
    samples_per_prompt: int = Field(8, ge=1)
    max_prompt_len: int = Field(1024, ge=1)
    max_completion_len: int = Field(1024, ge=1)
    micro_batch_size: int = Field(4, ge=1)
    logits_chunk_tokens: int = Field(1024, ge=1)  # learner.logits_chunk_tokens

    @property
    def seq_len(self) -> int:
        return self.max_prompt_len + self.max_completion_len


# ---- memory estimates ----------------------------------------------------------------------------
VLLM_RESERVE_GIB = 2.0  # vLLM's activation peak + CUDA graphs + allocator slack: a rough constant
LEARNER_CONTEXT_GIB = 1.0  # the learner process's CUDA context, cuBLAS workspace, allocator slack
VLLM_ASLEEP_GIB = 2.0   # a vLLM server asleep at level 1: CUDA context, graphs, buffers it keeps
DEFAULT_VLLM_UTILIZATION = 0.9  # on GPUs of the server's own


def parameter_bytes(gpu: GPUConfig) -> tuple[int, int, int]:
    """(weight, gradient, optimizer) bytes per trainable parameter of a full fine-tune."""
    act = _DTYPE_BYTES[gpu.dtype]
    if act == 4 or gpu.precision == "amp":
        return 4, 4, 8
    return act, act, {"pure": 2 * act, "kahan": 3 * act, "master": 12}[gpu.precision]


def learner_memory(gpu: GPUConfig, m: ModelShape, batch: BatchShape,
                   shards: int = 1) -> dict[str, float]:
    """Bytes on one learner GPU (GiB in the result).

    `shards` > 1: FSDP's full sharding over that many GPUs, for comparison with the replicated
    (DDP) learner the project runs: weights, gradients and optimizer states are divided by
    `shards`, and a GPU holds besides them the unit being computed gathered whole ("gathered":
    the largest FSDP unit, a decoder layer or the embedding / output head, times 2 for its
    weights and its full gradient before the reduce-scatter). Activations and logits are per
    micro-batch, the same under both.

    Full fine-tune, per parameter (`parameter_bytes`): pure bf16 2 + 2 grad + 4 (two moments,
    stochastic rounding); kahan + 2 (compensation); master 2 + 2 + 12 (float32 master and
    moments); amp or float32 4 + 4 + 8. LoRA: the frozen base in dtype (float32 under amp),
    adapters, their grads and moments in float32. Activations per micro-batch of
    T = micro x (prompt + completion) tokens: one layer's saved tensors ~ T x (6h + 2 kv_dim +
    4 I) values (SDPA/flash attention, no T^2 term); with gradient checkpointing L layer inputs
    (T x h) plus one layer; without, L layers. Logits: the output head runs on completion tokens
    only, in chunks of C = min(logits_chunk_tokens, micro x max_completion_len) rows; a chunk's
    backward holds C x V x (4 float32 logits + 4 softmax + dtype bytes for the head output and
    its gradient), plus one V x h head-weight gradient before it is accumulated (full
    fine-tune).
    """
    P, act = m.num_params(), _DTYPE_BYTES[gpu.dtype]
    wb, gb, ob = parameter_bytes(gpu)
    if gpu.lora is not None:
        T = m.lora_params(gpu.lora)
        base = 4 if gpu.precision == "amp" else act
        weights, grads, optim = P * base + T * 4, T * 4, T * 8
    else:
        weights, grads, optim = P * wb, P * gb, P * ob
    tokens = batch.micro_batch_size * batch.seq_len
    h, kv, inter = m.hidden_size, m.kv_dim, m.intermediate_size
    layer = tokens * (6 * h + 2 * kv + 4 * inter) * act
    if gpu.gradient_checkpointing:
        activations = m.num_layers * tokens * h * act + layer
    else:
        activations = m.num_layers * layer
    chunk = min(batch.logits_chunk_tokens, batch.micro_batch_size * batch.max_completion_len)
    logits = chunk * m.vocab_size * (8 + (act if act < 4 else 0))
    if gpu.lora is None:
        logits += m.vocab_size * h * gb
    out = {"weights": weights / shards, "grads": grads / shards, "optimizer": optim / shards,
           "activations": activations, "logits": logits}
    if shards > 1:
        out["gathered"] = 2 * fsdp_unit_params(m) * (4 if gpu.precision == "amp" else act)
    out["total"] = sum(out.values())
    out = {k: v / GIB for k, v in out.items()}
    # what stays allocated between steps (grads are freed, the cache released): the colocated
    # server wakes into the rest
    out["steady"] = out["weights"] + out["optimizer"]
    return out


def fsdp_unit_params(m: ModelShape) -> int:
    """Parameters of the largest FSDP unit when each decoder layer is one unit and the
    embedding (and an untied output head) another: max(one layer, vocab x hidden)."""
    h = m.hidden_size
    layer = sum(a * b for a, b in m.linear_shapes().values()) + 2 * h
    if m.qkv_bias:
        layer += h + 2 * m.kv_dim
    return max(layer, m.vocab_size * h)


def vllm_utilization(gpu: GPUConfig, learner: dict[str, float] | None) -> float:
    """vLLM's gpu_memory_utilization: the configured value; else 0.9 on GPUs of its own, and
    colocated the share the learner's steady state leaves (minus its CUDA context and 1 GiB of
    slack), rounded down to a hundredth."""
    if gpu.gpu_memory_utilization is not None:
        return gpu.gpu_memory_utilization
    if gpu.vllm_placement != "colocated" or learner is None:
        return DEFAULT_VLLM_UTILIZATION
    free = gpu.gpu_memory_gib - learner["steady"] - LEARNER_CONTEXT_GIB - 1.0
    return max(0.01, math.floor(100 * free / gpu.gpu_memory_gib) / 100)


def rollout_memory(gpu: GPUConfig, m: ModelShape, utilization: float | None = None) -> dict[str, float]:
    """Per vLLM GPU (GiB): weights P x dtype / tp; KV cache = utilization x GPU memory - weights -
    a fixed reserve; KV bytes per token per GPU = 2 (k, v) x L x ceil(kv_heads / tp) x head_dim x
    dtype bytes; how many tokens and full-length sequences the cache holds."""
    tp, b = gpu.tensor_parallel_size, _DTYPE_BYTES[gpu.dtype]
    weights = m.num_params() * b / tp / GIB
    utilization = utilization if utilization is not None else vllm_utilization(gpu, None)
    budget = utilization * gpu.gpu_memory_gib
    kv_cache = budget - weights - VLLM_RESERVE_GIB
    kv_per_token = 2 * m.num_layers * math.ceil(m.num_kv_heads / tp) * m.head_dim * b
    tokens = max(0.0, kv_cache) * GIB / kv_per_token
    return {"utilization": utilization, "budget": budget, "weights": weights, "reserve": VLLM_RESERVE_GIB,
            "kv_cache": kv_cache, "kv_bytes_per_token": float(kv_per_token),
            "kv_tokens": float(int(tokens)),
            "max_len_sequences": float(int(tokens // gpu.max_model_len))}


# ---- the plan ------------------------------------------------------------------------------------
@dataclass
class Plan:
    processes: list[dict] = field(default_factory=list)
    gpus: dict = field(default_factory=dict)
    batch: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    fits: bool = True
    notes: list[str] = field(default_factory=list)
    vllm_memory_utilization: float | None = None  # what a launched server is started with

    def to_dict(self) -> dict:
        return {"processes": self.processes, "gpus": self.gpus, "batch": self.batch,
                "memory": self.memory, "fits": self.fits, "notes": self.notes,
                "vllm_memory_utilization": self.vllm_memory_utilization}

    def render(self) -> str:
        lines = ["processes:"]
        lines += [f"  - {p['name']}: {p['what']} (GPUs {p['gpus'] or 'none'})" for p in self.processes]
        lines.append("gpus: " + ", ".join(f"{k}={v}" for k, v in self.gpus.items()))
        lines.append("batch: " + ", ".join(f"{k}={v}" for k, v in self.batch.items()))
        for role, mem in self.memory.items():
            lines.append(f"memory per {role} GPU (GiB): " +
                         ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                   for k, v in mem.items()))
        lines.append(f"fits: {'yes' if self.fits else 'NO'}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def resolve_plan(gpu: GPUConfig, model: ModelShape, batch: BatchShape) -> Plan:
    """What a run with these settings will start and need. Raises ValueError where the model and
    the settings cannot work together (tensor parallelism vs heads, lengths vs max_model_len)."""
    plan = Plan()
    tp = gpu.tensor_parallel_size
    if gpu.engine == "vllm":
        if model.num_heads % tp:
            raise ValueError(f"tensor_parallel_size={tp} does not divide {model.name}'s "
                             f"{model.num_heads} attention heads")
        if model.num_kv_heads % tp and tp % model.num_kv_heads:
            raise ValueError(f"tensor_parallel_size={tp} and {model.name}'s {model.num_kv_heads} "
                             "KV heads: one must divide the other")
    if batch.seq_len > gpu.max_model_len:
        raise ValueError(f"max_prompt_len + max_completion_len = {batch.seq_len} exceeds "
                         f"max_model_len={gpu.max_model_len}")
    if gpu.lora is not None:
        model.lora_params(gpu.lora)  # validates target modules

    learner_ids = list(range(gpu.learner_gpus)) if gpu.device == "cuda" else []
    if gpu.engine == "vllm" and gpu.vllm_placement == "server":
        rollout_ids = list(range(gpu.learner_gpus, gpu.learner_gpus + gpu.rollout_gpus))
    elif gpu.engine == "vllm":
        rollout_ids = learner_ids
    else:
        rollout_ids = learner_ids
    lm = learner_memory(gpu, model, batch)
    util = vllm_utilization(gpu, lm) if gpu.engine == "vllm" else None
    plan.vllm_memory_utilization = util
    # processes
    if gpu.engine == "vllm" and gpu.vllm_placement == "server":
        if gpu.launch_server:
            for r in range(gpu.server_replicas):
                name = "vllm-server" if gpu.server_replicas == 1 else f"vllm-server-{r}"
                plan.processes.append({"name": name, "gpus": rollout_ids[r * tp:(r + 1) * tp],
                                       "what": f"`selfplay vllm-serve` from $SELFPLAY_VLLM_VENV, "
                                               f"tp={tp}, gpu_memory_utilization="
                                               f"{util}"})
        else:
            plan.processes.append({"name": "vllm-server", "gpus": rollout_ids,
                                   "what": f"already running at {gpu.server_url} (not started)"})
    elif gpu.engine == "vllm":
        started = ("started by the run" if gpu.launch_server else
                   f"already running at {gpu.server_url}, started")
        plan.processes.append({"name": "vllm-server", "gpus": rollout_ids,
                               "what": f"colocated on the learner's GPU, {started} with "
                                       f"--enable-sleep-mode, gpu_memory_utilization={util}; "
                                       "sleeps (level 1) during each learner step, then wakes "
                                       "weights -> weight sync -> KV cache"})
    if gpu.device == "cuda" and gpu.distributed == "ddp" and gpu.learner_gpus > 1:
        for r in learner_ids:
            plan.processes.append({
                "name": f"learner-rank-{r}", "gpus": [r],
                "what": ("rank 0 of the learner group (torchrun): runs the loop, generates, "
                         "verifies, logs, checkpoints and pushes weights, learns on its shard"
                         if r == 0 else "a follower rank: learns on its shard, writes nothing")})
    elif gpu.device == "cuda":
        plan.processes.append({"name": "learner", "gpus": learner_ids,
                               "what": "in the run's process on one GPU"})
    else:
        plan.processes.append({"name": "learner", "gpus": [], "what": "one CPU process"})
    if gpu.engine == "hf":
        plan.processes.append({"name": "hf-engine", "gpus": learner_ids,
                               "what": "in the learner process (transformers generate)"})
    plan.processes.append({"name": "sandbox", "gpus": [], "what": "executor workers on CPU"})
    plan.gpus = {"total": gpu.num_gpus if gpu.device == "cuda" else 0,
                 "learner": learner_ids, "rollout": rollout_ids, "tensor_parallel": tp,
                 "idle": max(0, gpu.num_gpus - len(set(learner_ids) | set(rollout_ids)))
                 if gpu.device == "cuda" else 0}
    # batch shapes
    rollouts = batch.prompts_per_step * batch.samples_per_prompt
    ranks = gpu.learner_gpus if gpu.device == "cuda" and gpu.distributed != "none" else 1
    per_rank = math.ceil(rollouts / ranks)  # rl/distributed.py: contiguous shards, +-1 row
    micro = math.ceil(per_rank / batch.micro_batch_size)
    plan.batch = {"rollouts_per_step": rollouts, "rollouts_per_learner_gpu": per_rank,
                  "micro_batches_per_gpu": micro,
                  "micro_batch": f"{batch.micro_batch_size} x {batch.seq_len} tokens",
                  "tokens_per_step_max": rollouts * batch.seq_len,
                  "generation_requests": f"{batch.prompts_per_step} prompts x n="
                                         f"{batch.samples_per_prompt}"}
    # memory
    plan.memory["learner"] = lm
    if ranks > 1:  # what FSDP's full sharding would need instead of the replicas (not run)
        plan.memory["learner_if_fsdp"] = learner_memory(gpu, model, batch, shards=ranks)
    if gpu.device == "cuda" and lm["total"] + LEARNER_CONTEXT_GIB > gpu.gpu_memory_gib:
        plan.fits = False
        plan.notes.append(f"learner needs ~{lm['total'] + LEARNER_CONTEXT_GIB:.1f} GiB (with "
                          f"{LEARNER_CONTEXT_GIB:.0f} GiB of CUDA context) > {gpu.gpu_memory_gib} "
                          "GiB: enable gradient checkpointing, precision 'pure', LoRA, or a "
                          "smaller micro batch")
    if gpu.engine == "vllm":
        rm = rollout_memory(gpu, model, util)
        plan.memory["rollout"] = rm
        if rm["kv_cache"] <= 0:
            plan.fits = False
            plan.notes.append(f"vLLM weights ({rm['weights']:.1f} GiB) leave no KV cache in "
                              f"{rm['budget']:.1f} GiB: raise gpu_memory_utilization or tp")
        elif rm["max_len_sequences"] < 1:
            plan.fits = False
            plan.notes.append(f"vLLM KV cache holds {int(rm['kv_tokens'])} tokens, less than one "
                              f"max_model_len={gpu.max_model_len} sequence")
        if gpu.vllm_placement == "colocated":
            _check_colocated(plan, gpu, lm, rm)
        plan.notes.append(weight_sync_note(gpu, model))
    return plan


def weight_sync_note(gpu: GPUConfig, model: ModelShape) -> str:
    """The plan's line on the weight transport: which one this process would use, and why."""
    import importlib.util

    from selfplay_core.engines.weight_sync import choose_transport

    trl_vllm = all(importlib.util.find_spec(m) is not None for m in ("trl", "vllm"))
    mode, why = choose_transport(gpu.weight_sync, placement=gpu.vllm_placement,
                                 peft=gpu.lora is not None, cuda=gpu.device == "cuda",
                                 trl_vllm=trl_vllm)
    size = model.num_params() * _DTYPE_BYTES[gpu.dtype] / GIB
    cost = {"filesystem": f"~{size:.1f} GiB written and re-read per update",
            "nccl": f"~{size:.1f} GiB broadcast per update",
            "ipc": "no copy (handles to the learner's tensors)",
            "lora": "the adapter only", "none": "nothing"}[mode]
    return f"weight sync: {mode} — {why}; {cost}"


def _check_colocated(plan: Plan, gpu: GPUConfig, lm: dict, rm: dict) -> None:
    """One GPU, two phases. Generating: the learner's steady state (weights + AdamW states; its
    gradients freed and its cache released after the step) beside vLLM's share. Stepping: the
    learner's peak beside a server asleep at level 1 (weights in CPU memory, KV cache freed)."""
    awake = lm["steady"] + LEARNER_CONTEXT_GIB + rm["budget"]
    stepping = lm["total"] + LEARNER_CONTEXT_GIB + VLLM_ASLEEP_GIB
    plan.memory["colocated"] = {"generating": awake, "learner_step": stepping,
                                "learner_steady": lm["steady"], "vllm_budget": rm["budget"],
                                "vllm_asleep": VLLM_ASLEEP_GIB}
    if awake > gpu.gpu_memory_gib:
        plan.fits = False
        plan.notes.append(f"colocated: learner weights + AdamW states ({lm['steady']:.1f} GiB) "
                          f"+ vLLM's share ({rm['budget']:.1f} GiB) exceed "
                          f"{gpu.gpu_memory_gib} GiB: lower gpu_memory_utilization (or leave it "
                          "unset: the plan sizes it)")
    if stepping > gpu.gpu_memory_gib:
        plan.fits = False
        plan.notes.append(f"colocated: the learner step (~{lm['total']:.1f} GiB) beside a "
                          f"sleeping vLLM server ({VLLM_ASLEEP_GIB} GiB) exceeds "
                          f"{gpu.gpu_memory_gib} GiB")
