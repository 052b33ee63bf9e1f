"""The sections of tools/gpu_check.py, each run in a process of its own (`run_child`).

Models are built from the Qwen2.5-Coder shapes in selfplay_core.engines.gpu_config with random
weights (no download); `--smoke` swaps in tiny shapes so every section that can runs on a CPU.
A section returns a dict; one that needs CUDA and finds none returns {"gpu_only": why}.
"""

from __future__ import annotations

import builtins
import gc
import importlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("vllm", "trl", "prefect", "mlflow", "datasets")
ATTEMPTED: list[str] = []
GIB = float(1 << 30)
# dense bf16 peak and HBM bandwidth by device name (vendor data sheets)
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "H800": 989e12, "GH200": 989e12, "B200": 2250e12,
             "A100": 312e12, "L40S": 362e12}
BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "H800": 3.35e12, "GH200": 4.0e12, "B200": 8.0e12,
             "A100": 2.0e12, "L40S": 0.864e12}
CARD_80GB_BYTES = 85_520_809_984  # total_memory an 80 GB H100 reports
CUDA_CONTEXT_BYTES = 600 << 20    # outside the caching allocator, so outside its fraction


def block_absent_packages() -> None:
    """Make the packages the target machine lacks absent here too: a None entry in sys.modules
    makes `import x` raise ImportError and `importlib.util.find_spec("x")` answer None (how
    libraries probe optional packages); an `import` statement that reaches one is recorded."""
    for name in FORBIDDEN:
        sys.modules[name] = None
    real_import = builtins.__import__

    def recording_import(name, *args, **kwargs):
        if name.split(".")[0] in FORBIDDEN:
            ATTEMPTED.append(name)
        return real_import(name, *args, **kwargs)

    builtins.__import__ = recording_import


@dataclass
class Ctx:
    smoke: bool
    device: str
    out: Path
    peak_override: float | None
    carried: bool

    @property
    def probe(self) -> dict:
        f = self.out / "probe.json"
        try:
            return json.loads(f.read_text()).get("result", {})
        except (OSError, ValueError):
            return {}

    def peak_flops(self) -> tuple[float | None, str]:
        if self.peak_override:
            return self.peak_override * 1e12, "override"
        name = self.probe.get("gpu") or ""
        nominal = next((v for k, v in PEAK_BF16.items() if k in name), None)
        if nominal:
            return nominal, f"nominal dense bf16 of {name}"
        measured = self.probe.get("matmul_tflops")
        return (measured * 1e12, "measured matmul") if measured else (None, "unknown")


def utilization(params: int, tokens_per_s: float, peak_flops: float | None,
                flops_per_param_token: int = 6) -> float | None:
    """Model FLOPs utilization: a training step costs ~6 FLOPs per parameter per token (2 for
    the forward, 4 for the backward); `flops_per_param_token=8` counts a recomputed forward
    (hardware FLOPs under gradient checkpointing). None without a known peak."""
    if not peak_flops:
        return None
    return round(flops_per_param_token * params * tokens_per_s / peak_flops, 4)


def run_child(name: str, out: Path, *, smoke: bool, peak_tflops: float | None, carried: bool) -> int:
    block_absent_packages()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    ctx = Ctx(smoke=smoke, device=device, out=out, peak_override=peak_tflops, carried=carried)
    t0 = time.monotonic()
    _injected_fault(name)
    try:
        if device == "cpu" and not smoke:
            result = {"gpu_only": "no CUDA device: the full shapes need a GPU (use --smoke)"}
        else:
            result = SECTIONS[name](ctx)
        line = {"status": "gpu_only" if "gpu_only" in result else "ok", "result": result}
    except Exception as e:  # noqa: BLE001 - reported in the section's line
        line = {"status": "error", "error": f"{type(e).__name__}: {e}"[:2000],
                "trace": traceback.format_exc()[-3000:]}
    line["child_s"] = round(time.monotonic() - t0, 2)
    line["device"] = device
    line["blocked_imports_attempted"] = sorted(set(ATTEMPTED))
    tmp = out / f".{name}.json.tmp"
    tmp.write_text(json.dumps(line, sort_keys=True, default=str))
    os.replace(tmp, out / f"{name}.json")
    return 0


def _injected_fault(name: str) -> None:
    """GPU_CHECK_FAULT=section:hang|crash[,...]: a section that hangs (a stuck kernel) or dies
    (a segfault), which a CPU cannot be made to do; the driver's tests use it to check that the
    other sections' results survive."""
    for item in filter(None, os.environ.get("GPU_CHECK_FAULT", "").split(",")):
        section, _, what = item.partition(":")
        if section == name and what == "hang":
            time.sleep(10 ** 6)
        if section == name and what == "crash":
            os._exit(3)


# ---- helpers ---------------------------------------------------------------------------------
def shapes(smoke: bool) -> dict:
    from selfplay_core.engines.gpu_config import QWEN25_CODER, ModelShape

    if not smoke:
        return dict(QWEN25_CODER)
    return {name: ModelShape(name=f"smoke-{name}", hidden_size=h, num_layers=2, num_heads=4,
                             num_kv_heads=2, intermediate_size=2 * h, vocab_size=512,
                             tie_word_embeddings=tied)
            for name, h, tied in (("0.5b", 32, True), ("1.5b", 48, True), ("7b", 64, False))}


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def free_memory(device: str) -> None:
    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def memory(device: str) -> dict:
    import torch

    if device != "cuda":
        return {}
    free, total = torch.cuda.mem_get_info()
    return {"allocated_gib": round(torch.cuda.memory_allocated() / GIB, 2),
            "max_allocated_gib": round(torch.cuda.max_memory_allocated() / GIB, 2),
            "max_reserved_gib": round(torch.cuda.max_memory_reserved() / GIB, 2),
            "driver_free_gib": round(free / GIB, 2), "driver_total_gib": round(total / GIB, 2)}


def build_model(shape, device: str, dtype):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(**shape.hf_config_kwargs())
    cfg._attn_implementation = "sdpa"
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # initialise in the target dtype: a 7B model in fp32 is 30 GB
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    return model


def random_rollouts(shape, batch, n: int, seed: int = 0):
    import torch

    from selfplay_core.rl.learner import Rollout

    g = torch.Generator().manual_seed(seed)
    old = -math.log(shape.vocab_size)  # about the random model's logprob: ratios start near 1
    out = []
    for i in range(n):
        ids = torch.randint(0, shape.vocab_size, (batch.seq_len,), generator=g).tolist()
        p = batch.max_prompt_len
        out.append(Rollout(ids[:p], ids[p:], [old] * (len(ids) - p), 1.0 if i % 2 else -1.0))
    return out


def word_tokenizer(vocab_size: int):
    """One word per token id ("t0" .. "tN"): text prompts for a random model, no download. The
    end-of-sequence token is one id past the model's vocabulary, so sampling never stops early
    and every sequence is exactly as long as asked."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size)} | {"<eos>": vocab_size}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", pad_token="t0",
                                   eos_token="<eos>")


# ---- probe -----------------------------------------------------------------------------------
def probe(ctx: Ctx) -> dict:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "device": ctx.device,
            "pydantic_source": "carried" if ctx.carried else "installed"}
    for mod in ("transformers", "accelerate", "peft", "pydantic", "tokenizers", "safetensors"):
        try:
            info[mod] = importlib.import_module(mod).__version__
        except ImportError:
            info[mod] = None
    dev = ctx.device
    if dev == "cuda":
        p = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        info.update(gpu=p.name, gpu_count=torch.cuda.device_count(), capability=f"{p.major}.{p.minor}",
                    total_gib=round(total / GIB, 2), free_gib=round(free / GIB, 2))
    n = 512 if dev == "cpu" else 8192
    dtype = torch.float32 if dev == "cpu" else torch.bfloat16
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(dev)
    reps = 5 if dev == "cpu" else 30
    t0 = time.monotonic()
    for _ in range(reps):
        a @ b
    sync(dev)
    info["matmul_tflops"] = round(2 * n ** 3 * reps / (time.monotonic() - t0) / 1e12, 2)
    info["matmul"] = f"{n}x{n} {str(dtype).removeprefix('torch.')}"
    size = (64 << 20) if dev == "cpu" else (2 << 30)
    x = torch.empty(size, dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    y.copy_(x)
    sync(dev)
    t0 = time.monotonic()
    for _ in range(10):
        y.copy_(x)
    sync(dev)
    info["copy_gb_per_s"] = round(2 * size * 10 / (time.monotonic() - t0) / 1e9, 1)  # read + write
    name = info.get("gpu") or ""
    info["nominal_bf16_tflops"] = next((v / 1e12 for k, v in PEAK_BF16.items() if k in name), None)
    info["nominal_bandwidth_gb_per_s"] = next((v / 1e9 for k, v in BANDWIDTH.items() if k in name), None)
    return info


# ---- learner ---------------------------------------------------------------------------------
def learner_7b(ctx: Ctx) -> dict:
    """The 7B learner at the configured micro-batch (4 x 2048: prompt 1024 + completion 1024,
    the 7B config) under an 80 GB memory fraction, then a smaller shape on the whole card."""
    import torch

    from selfplay_core.engines.gpu_config import (LEARNER_CONTEXT_GIB, BatchShape, GPUConfig,
                                                  learner_memory)
    from selfplay_core.rl.gpu import prepare_model
    from selfplay_core.rl.learner import Learner, LearnerConfig

    dev, smoke = ctx.device, ctx.smoke
    shape = shapes(smoke)["7b"]
    dtype_name = "float32" if dev == "cpu" else "bfloat16"
    if smoke:
        configured = BatchShape(max_prompt_len=8, max_completion_len=8, micro_batch_size=2)
        smaller = BatchShape(max_prompt_len=4, max_completion_len=4, micro_batch_size=1)
        n_rollouts, steps = 4, 1
    else:
        configured = BatchShape(max_prompt_len=1024, max_completion_len=1024, micro_batch_size=4)
        smaller = BatchShape(max_prompt_len=512, max_completion_len=512, micro_batch_size=2)
        n_rollouts, steps = 8, 2
    out = {"shape": shape.name, "params": shape.num_params(), "dtype": dtype_name,
           "precision": "pure (bf16, stochastic-rounding AdamW)", "gradient_checkpointing": True}
    fraction = None
    if dev == "cuda":
        total = torch.cuda.get_device_properties(0).total_memory
        fraction = min(1.0, (CARD_80GB_BYTES - CUDA_CONTEXT_BYTES) / total)
        torch.cuda.set_per_process_memory_fraction(fraction)
    out["emulated_80gb_fraction"] = fraction
    t0 = time.monotonic()
    model = build_model(shape, dev, getattr(torch, dtype_name))
    model = prepare_model(model, dtype=dtype_name, precision="pure", gradient_checkpointing=True)
    out["init_s"] = round(time.monotonic() - t0, 1)
    peak, peak_what = ctx.peak_flops()
    out["peak_flops"], out["peak_from"] = peak, peak_what

    def run(batch, label):
        learner = Learner(model, LearnerConfig(lr=1e-6, micro_batch_size=batch.micro_batch_size,
                                               max_completion_len=batch.max_completion_len))
        rolls = random_rollouts(shape, batch, n_rollouts)
        tokens = n_rollouts * batch.seq_len
        gpu = GPUConfig(device="cpu", engine="hf", dtype="float32") if dev == "cpu" else \
            GPUConfig(engine="hf", dtype=dtype_name, precision="pure", gradient_checkpointing=True)
        plan = learner_memory(gpu, shape, batch)
        res = {"micro_batch": f"{batch.micro_batch_size} x {batch.seq_len}",
               "rollouts": n_rollouts, "tokens_per_step": tokens,
               "plan_total_gib": round(plan["total"] + LEARNER_CONTEXT_GIB, 2),
               "plan": {k: round(v, 2) for k, v in plan.items()}}
        try:
            free_memory(dev)
            t = time.monotonic()
            learner.step(rolls)  # warm-up: kernels, allocator, AdamW states
            sync(dev)
            res["first_step_s"] = round(time.monotonic() - t, 2)
            t = time.monotonic()
            for _ in range(steps):
                metrics = learner.step(rolls)
            sync(dev)
        except torch.OutOfMemoryError as e:
            res["oom"] = str(e).splitlines()[0][:300]
            res.update(memory(dev))
            learner.optimizer.zero_grad(set_to_none=True)
            learner.accelerator.free_memory()
            del learner
            free_memory(dev)
            return res
        dt = (time.monotonic() - t) / steps
        tps = tokens / dt
        res.update(step_s=round(dt, 3), tokens_per_s=round(tps, 1),
                   mfu=utilization(shape.num_params(), tps, peak),
                   # checkpointing recomputes the forward: the GPU does ~8 P tokens of work
                   hardware_flops_utilization=utilization(shape.num_params(), tps, peak,
                                                          flops_per_param_token=8),
                   loss_finite=math.isfinite(metrics["learner/loss"]),
                   changed_share=metrics.get("learner/changed_share"),
                   update_visibility=metrics.get("learner/update_visibility"), **memory(dev))
        learner.accelerator.free_memory()
        del learner
        free_memory(dev)
        return res

    out["configured_80gb"] = run(configured, "configured")
    if dev == "cuda":
        torch.cuda.set_per_process_memory_fraction(1.0)
        if "oom" in out["configured_80gb"]:
            out["configured_full_card"] = run(configured, "configured")  # how much it needs
    out["fits_80gb"] = "oom" not in out["configured_80gb"]
    out["smaller"] = run(smaller, "smaller")
    return out


# ---- bf16 update visibility -------------------------------------------------------------------
def bf16_visibility(ctx: Ctx) -> dict:
    """One real backward pass on the 0.5B shape in bf16, then 3 AdamW steps at lr 1e-6 with those
    gradients through each storage, from the same weights; float32 AdamW on the same gradients
    is the reference. Reports the share of weights (and of norm weights) that changed and the
    projection <moved, intended> / <intended, intended>: 1 = the update arrived."""
    import torch

    from selfplay_core.engines.gpu_config import BatchShape
    from selfplay_core.rl.gpu import prepare_model
    from selfplay_core.rl.learner import _pad_batch, token_logprobs
    from selfplay_core.rl.optim import LowPrecisionAdamW

    dev = ctx.device
    shape = shapes(ctx.smoke)["0.5b"]
    batch = BatchShape(max_prompt_len=16 if ctx.smoke else 256,
                       max_completion_len=16 if ctx.smoke else 256, micro_batch_size=4)
    model = prepare_model(build_model(shape, dev, torch.bfloat16), dtype="bfloat16",
                          precision="pure", gradient_checkpointing=not ctx.smoke)
    b = _pad_batch(random_rollouts(shape, batch, 4), 0, dev)
    lp, _ = token_logprobs(model, b["ids"], b["attn"], score_mask=b["cmask"])
    (-(lp * b["cmask"] * b["adv"][:, None]).sum() / b["cmask"].sum()).backward()
    names = [n for n, _ in model.named_parameters()]
    start = [p.detach().clone() for p in model.parameters()]
    grads = [p.grad.detach().clone() for p in model.parameters()]
    del model, lp, b
    free_memory(dev)
    lr, steps = 1e-6, 3
    ref = [torch.nn.Parameter(s.float()) for s in start]
    ref_opt = torch.optim.AdamW(ref, lr=lr, weight_decay=0.0)
    for _ in range(steps):
        for p, g in zip(ref, grads):
            p.grad = g.float()
        ref_opt.step()
    intended = [r.detach() - s.float() for r, s in zip(ref, start)]
    den = sum(float((i.double() ** 2).sum()) for i in intended)
    del ref, ref_opt
    free_memory(dev)
    out = {"shape": shape.name, "lr": lr, "steps": steps}
    for label, make in (("before: torch AdamW on bf16", lambda ps: torch.optim.AdamW(ps, lr=lr, weight_decay=0.0)),
                        ("after: stochastic (pure)", lambda ps: LowPrecisionAdamW(ps, lr=lr, rounding="stochastic")),
                        ("after: kahan", lambda ps: LowPrecisionAdamW(ps, lr=lr, rounding="kahan")),
                        ("after: master", lambda ps: LowPrecisionAdamW(ps, lr=lr, rounding="master"))):
        params = [torch.nn.Parameter(s.clone()) for s in start]
        opt = make(params)
        times = []
        for _ in range(steps):
            for p, g in zip(params, grads):
                p.grad = g.clone()
            sync(dev)
            t = time.monotonic()
            opt.step()
            sync(dev)
            times.append(time.monotonic() - t)
        held = []
        for p in params:
            st = opt.state[p]
            if "master" in st:
                held.append(st["master"])
            elif "compensation" in st:
                held.append(p.detach().float() + st["compensation"].float())
            else:
                held.append(p.detach().float())
        moved = [h - s.float() for h, s in zip(held, start)]
        total = sum(p.numel() for p in params)
        changed = sum(int((p.detach() != s).sum()) for p, s in zip(params, start))
        norm = [(p, s) for n, p, s in zip(names, params, start) if "norm" in n]
        norm_changed = sum(int((p.detach() != s).sum()) for p, s in norm)
        out[label] = {
            "bf16_weights_changed_share": round(changed / total, 5),
            "norm_weights_changed_share": round(norm_changed / max(1, sum(p.numel() for p, _ in norm)), 5),
            "update_arrived_projection": round(sum(float((m.double() * i.double()).sum())
                                                   for m, i in zip(moved, intended)) / den, 4),
            "step_ms": round(1000 * sorted(times)[len(times) // 2], 1),
        }
        del params, opt, held, moved
        free_memory(dev)
    return out


# ---- weight sync -------------------------------------------------------------------------------
def _checksums(named) -> dict:
    return {n: float(t.detach().double().sum()) for n, t in named}


def sync_rehearsal(ctx: Ctx) -> dict:
    import torch

    from selfplay_core.engines.vllm import write_checkpoint

    dev = ctx.device
    shape = shapes(ctx.smoke)["1.5b"]
    dtype = torch.float32 if dev == "cpu" else torch.bfloat16
    model = build_model(shape, dev, dtype)
    own = _checksums(model.state_dict().items())
    out = {"shape": shape.name, "bytes": sum(t.numel() * t.element_size()
                                             for t in model.state_dict().values())}
    # the system's temp folder, not OUT: a section killed mid-write must not leave GBs of
    # checkpoint among the results that are copied back
    with tempfile.TemporaryDirectory(prefix="gpu-check-sync-") as tmp:
        target = Path(tmp) / "served"
        t = time.monotonic()
        write_checkpoint(model, target)
        write_s = time.monotonic() - t
        out["fs_write_s"] = round(write_s, 3)
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "reload", str(target),
                               dev, str(dtype).removeprefix("torch.")],
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  [str(ROOT), os.environ.get("PYTHONPATH", "")])})
        if proc.returncode != 0:
            raise RuntimeError(f"reload process failed: {proc.stderr[-1500:]}")
        theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    out["fs_reload_s"] = round(theirs["load_s"], 3)
    out["fs_reload_process_s"] = theirs["process_s"]
    out["fs_checksums_match"] = _compare(own, theirs["checksums"])
    gb = out["bytes"] / 1e9
    write_bw, reload_bw = gb / max(write_s, 1e-9), gb / max(theirs["load_s"], 1e-9)
    out["fs_write_gb_per_s"], out["fs_reload_gb_per_s"] = round(write_bw, 3), round(reload_bw, 3)
    p7 = shapes(False)["7b"].num_params() * 2 / 1e9  # a 7B update in bf16, 15.2 GB
    out["fs_7b_estimate_s"] = round(p7 / write_bw + p7 / reload_bw, 1)
    if dev != "cuda":
        out["ipc"] = {"gpu_only": "CUDA IPC handles need a CUDA device"}
        return out
    import torch.multiprocessing as mp

    mpctx = mp.get_context("spawn")
    q_in, q_out = mpctx.Queue(), mpctx.Queue()
    child = mpctx.Process(target=_ipc_child, args=(q_in, q_out))
    child.start()
    try:
        tensors = {n: t.detach() for n, t in model.state_dict().items()}
        t = time.monotonic()
        q_in.put(tensors)  # torch's reductions send a CUDA IPC handle per storage
        theirs = q_out.get(timeout=120)
        out["ipc_s"] = round(time.monotonic() - t, 2)
        out["ipc_open_s"] = theirs["open_s"]
        out["ipc_checksums_match"] = _compare(own, theirs["checksums"])
        out["ipc_tensors"] = len(tensors)
        q_in.put(None)
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
    return out


def _compare(own: dict, theirs: dict) -> bool:
    return set(own) == set(theirs) and all(
        math.isclose(own[k], theirs[k], rel_tol=1e-6, abs_tol=1e-6) for k in own)


def _ipc_child(q_in, q_out) -> None:
    import torch

    tensors = q_in.get()
    t = time.monotonic()
    sums = _checksums(tensors.items())
    torch.cuda.synchronize()
    q_out.put({"open_s": round(time.monotonic() - t, 2), "checksums": sums})
    q_in.get()  # keep the handles open until the parent is done


def _reload_main(folder: str, device: str, dtype: str) -> int:
    t0 = time.monotonic()
    import torch
    from transformers import AutoModelForCausalLM

    t = time.monotonic()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).to(device)
    sync(device)
    load_s = time.monotonic() - t
    print(json.dumps({"load_s": load_s, "process_s": round(time.monotonic() - t0, 2),
                      "checksums": _checksums(model.state_dict().items())}))
    return 0


# ---- colocation ------------------------------------------------------------------------------
def colocation(ctx: Ctx) -> dict:
    """A second process stands in for a colocated vLLM server: it holds 7B-sized bf16 weights and
    a KV cache of the plan's size, sleeps (weights to pinned CPU memory, cache freed, its CUDA
    cache emptied) around each learner step and wakes weights, then cache. (vLLM's own sleep
    mode frees through its CuMem allocator; this rehearses the memory choreography and times.)"""
    if ctx.device != "cuda":
        return {"gpu_only": "sleeping and waking GPU memory needs a CUDA device"}
    import torch
    import torch.multiprocessing as mp

    from selfplay_core.engines.gpu_config import QWEN25_CODER, BatchShape, GPUConfig, resolve_plan
    from selfplay_core.rl.gpu import prepare_model
    from selfplay_core.rl.learner import Learner, LearnerConfig

    plan = resolve_plan(GPUConfig(engine="vllm", vllm_placement="colocated", launch_server=True,
                                  num_gpus=1, gpu_memory_gib=80.0), QWEN25_CODER["7b"], BatchShape())
    rm = plan.memory["rollout"]
    weights_gib, kv_gib = rm["weights"], max(1.0, rm["kv_cache"])
    mpctx = mp.get_context("spawn")
    cmd, resp = mpctx.Queue(), mpctx.Queue()
    server = mpctx.Process(target=_server_child, args=(cmd, resp, weights_gib, kv_gib))
    server.start()
    phases = []

    def mark(what, **extra):
        free, total = torch.cuda.mem_get_info()
        phases.append({"phase": what, "driver_used_gib": round((total - free) / GIB, 2),
                       "learner_allocated_gib": round(torch.cuda.memory_allocated() / GIB, 2),
                       "learner_reserved_gib": round(torch.cuda.memory_reserved() / GIB, 2), **extra})

    def ask(what):
        cmd.put(what)
        return resp.get(timeout=120)

    try:
        resp.get(timeout=120)
        mark("server awake (weights + KV), no learner")
        shape = QWEN25_CODER["1.5b"]
        model = prepare_model(build_model(shape, "cuda", torch.bfloat16), dtype="bfloat16",
                              precision="pure", gradient_checkpointing=True)
        batch = BatchShape(max_prompt_len=512, max_completion_len=512, micro_batch_size=4)
        learner = Learner(model, LearnerConfig(lr=1e-6, micro_batch_size=4), release_cuda_cache=True)
        rolls = random_rollouts(shape, batch, 8)
        mark("learner model loaded")
        cycles = []
        for cycle in range(2):
            sleep_s = ask("sleep")
            mark(f"cycle {cycle}: server asleep")
            torch.cuda.reset_peak_memory_stats()
            t = time.monotonic()
            learner.step(rolls)
            torch.cuda.synchronize()
            step_s = time.monotonic() - t
            mark(f"cycle {cycle}: after the step, cache released",
                 learner_step_peak_gib=round(torch.cuda.max_memory_reserved() / GIB, 2))
            wake_w = ask("wake_weights")
            wake_kv = ask("wake_kv")
            mark(f"cycle {cycle}: server awake again")
            cycles.append({"sleep_s": sleep_s, "learner_step_s": round(step_s, 2),
                           "wake_weights_s": wake_w, "wake_kv_cache_s": wake_kv})
        ask("stop")
    finally:
        server.join(timeout=30)
        if server.is_alive():
            server.kill()
    return {"server_weights_gib": round(weights_gib, 2), "server_kv_gib": round(kv_gib, 2),
            "learner_shape": "Qwen2.5-Coder-1.5B", "cycles": cycles, "phases": phases,
            "plan_vllm_utilization_80gb": plan.vllm_memory_utilization}


def _server_child(cmd, resp, weights_gib: float, kv_gib: float) -> None:
    import torch

    n_w, n_kv = int(weights_gib * GIB) // 2, int(kv_gib * GIB) // 2
    weights = torch.ones(n_w, dtype=torch.bfloat16, device="cuda")
    kv = torch.empty(n_kv, dtype=torch.bfloat16, device="cuda")
    host = torch.empty(n_w, dtype=torch.bfloat16, pin_memory=True)
    torch.cuda.synchronize()
    resp.put("ready")
    while True:
        what = cmd.get()
        t = time.monotonic()
        if what == "sleep":
            host.copy_(weights, non_blocking=True)
            torch.cuda.synchronize()
            del weights, kv
            weights = kv = None
            torch.cuda.empty_cache()
        elif what == "wake_weights":
            weights = host.to("cuda", non_blocking=True)
            torch.cuda.synchronize()
        elif what == "wake_kv":
            kv = torch.empty(n_kv, dtype=torch.bfloat16, device="cuda")
            torch.cuda.synchronize()
        elif what == "stop":
            resp.put("bye")
            return
        resp.put(round(time.monotonic() - t, 3))


# ---- generation --------------------------------------------------------------------------------
def generation(ctx: Ctx) -> dict:
    """selfplay's HFEngine, sampling at T = 1: tokens/s, and the roofline a decode step cannot
    beat: every step reads all weights once plus the live KV cache, at the measured copy
    bandwidth (the nominal HBM bandwidth where known is reported too)."""
    import torch

    from selfplay_core.engines.base import SamplingParams
    from selfplay_core.engines.hf import HFEngine

    dev = ctx.device
    shape = shapes(ctx.smoke)["1.5b"]
    dtype = torch.float32 if dev == "cpu" else torch.bfloat16
    bs, plen, new = (4, 8, 8) if ctx.smoke else (64, 128, 128)
    model = build_model(shape, dev, dtype).eval()
    tok = word_tokenizer(shape.vocab_size)
    engine = HFEngine(model, tok, device=dev, batch_size=bs)
    g = torch.Generator().manual_seed(1)
    prompts = [" ".join(f"t{int(i)}" for i in torch.randint(2, shape.vocab_size, (plen,), generator=g))
               for _ in range(bs)]
    engine.generate(prompts[:2], 1, SamplingParams(temperature=1.0, max_new_tokens=2, seed=0))
    sync(dev)
    t = time.monotonic()
    outs = engine.generate(prompts, 1, SamplingParams(temperature=1.0, max_new_tokens=new, seed=0))
    sync(dev)
    dt = time.monotonic() - t
    n = sum(len(c.token_ids) for group in outs for c in group)
    bytes_per = 2 if dtype == torch.bfloat16 else 4
    weight_bytes = shape.num_params() * bytes_per
    kv_per_token = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * bytes_per
    avg_context = plen + new / 2
    step_bytes = weight_bytes + bs * avg_context * kv_per_token
    probe_info = ctx.probe
    measured_bw = (probe_info.get("copy_gb_per_s") or 0) * 1e9 or None
    nominal_bw = (probe_info.get("nominal_bandwidth_gb_per_s") or 0) * 1e9 or None
    out = {"shape": shape.name, "batch": bs, "prompt_len": plen, "new_tokens": new,
           "tokens": n, "seconds": round(dt, 3), "tokens_per_s": round(n / dt, 1),
           "decode_step_ms": round(1000 * dt / new, 2), "bytes_per_decode_step": step_bytes}
    for label, bw in (("measured_copy_bandwidth", measured_bw), ("nominal_bandwidth", nominal_bw)):
        if bw:
            roof = bs * bw / step_bytes
            out[f"roofline_tokens_per_s_{label}"] = round(roof, 1)
            out[f"share_of_roofline_{label}"] = round((n / dt) / roof, 4)
    return out


# ---- logprob consistency ---------------------------------------------------------------------
def logprobs(ctx: Ctx) -> dict:
    """The toy model (committed, trained) samples with HFEngine at T = 1.0 and 0.4; the learner
    scores the same tokens (token_logprobs with the rows' temperature). |delta| per token, in
    float32 and in bf16."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfplay_core.engines.base import SamplingParams
    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.rl.learner import Rollout, _pad_batch, token_logprobs
    from selfplay_core.worlds import world_class

    dev = ctx.device
    path = world_class("toy").default_model()
    tok = AutoTokenizer.from_pretrained(str(path))
    prompts = [f"### Task\nReturn the sum of the list plus {k}.\n### Solution\ndef f(x):\n"
               for k in range(2 if ctx.smoke else 16)]
    n, new = (2, 24) if ctx.smoke else (4, 48)
    out = {"model": str(path.name)}
    dtypes = (("float32", torch.float32),) if dev == "cpu" else (("float32", torch.float32),
                                                                 ("bfloat16", torch.bfloat16))
    for dname, dtype in dtypes:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(dev).eval()
        engine = HFEngine(model, tok, device=dev, batch_size=64)
        for temp in (1.0, 0.4):
            groups = engine.generate(prompts, n, SamplingParams(temperature=temp, max_new_tokens=new, seed=1))
            rolls = [Rollout(list(c.prompt_token_ids), list(c.token_ids), list(c.logprobs), 0.0,
                             temperature=temp) for g in groups for c in g if c.token_ids]
            b = _pad_batch(rolls, engine.pad_id, dev)
            with torch.no_grad():
                lp, _ = token_logprobs(model, b["ids"], b["attn"], temps=b["temps"], score_mask=b["cmask"])
            mask = b["cmask"].bool()
            d = (lp - b["old"]).abs()[mask].float()
            out[f"{dname}_T{temp}"] = {"tokens": int(mask.sum()), "mean_abs": float(d.mean()),
                                       "p99_abs": float(d.quantile(0.99)), "max_abs": float(d.max())}
        del model, engine
        free_memory(dev)
    return out


# ---- one headless toy iteration ----------------------------------------------------------------
def toy_iteration(ctx: Ctx) -> dict:
    from selfplay_core.loop.headless import run_default_loop

    t = time.monotonic()
    result = run_default_loop(iterations=1, device=ctx.device)
    return {"seconds": round(time.monotonic() - t, 2), "result": result}


SECTIONS = {"probe": probe, "learner_7b": learner_7b, "bf16_visibility": bf16_visibility,
            "sync": sync_rehearsal, "colocation": colocation, "generation": generation,
            "logprobs": logprobs, "toy_iteration": toy_iteration}


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "reload":
    sys.exit(_reload_main(*sys.argv[2:5]))
