#!/usr/bin/env python
"""One prepared check for a lent accelerator: prints one JSON summary (and writes it to --out).

Measures, on randomly initialised models with the Qwen2.5-Coder 0.5B / 1.5B / 7B shapes (configs
from selfplay_core.engines.gpu_config, no download):
  1. learner step throughput through the real shared learner (selfplay_core.rl.learner) prepared
     by selfplay_core.rl.gpu (pure bf16, gradient checkpointing): tokens/s, model FLOPs
     utilisation MFU = 6 * params * tokens / seconds / peak (989e12 dense bf16 for H100/H200; with
     gradient checkpointing the GPU really does ~8 * params * tokens, so hardware utilisation is
     ~4/3 of the MFU shown), and peak memory next to the dry-run plan's estimate;
     plus one LoRA step on the 7B shape (peft path);
  2. generation tokens/s with transformers `generate` (KV cache, sampling, fixed length), and
     through selfplay_core.engines.hf.HFEngine when that module exists;
  3. the toy-world default loop for a few iterations, when `selfplay_core.loop.headless` provides
     `run_default_loop(iterations: int, device: str) -> dict` (skipped with a note otherwise).

The machine it is meant for has torch, transformers, accelerate and peft but no vLLM, TRL,
Prefect or MLflow: this script blocks those imports (directly or through selfplay modules) so a
CPU run behaves the same, and reports any attempt. Every section has a time guard; the whole run
stays under --budget-s (default 420 s) plus start-up. `--smoke` runs tiny shapes on CPU in
seconds (the test suite does, so the script does not rot).

    python benchmarks/gpu_check.py --out gpu_check.json          # on the GPU machine
    python benchmarks/gpu_check.py --smoke                       # anywhere
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FORBIDDEN = ("vllm", "trl", "prefect", "mlflow")
ATTEMPTED: list[str] = []


def _block_absent_packages() -> None:
    """Make the packages the target machine lacks absent here too. A None entry in sys.modules
    makes `import x` raise ImportError and `importlib.util.find_spec("x")` answer None, which is
    how libraries probe optional packages; an `import` statement that reaches one is recorded."""
    import builtins

    for name in FORBIDDEN:
        sys.modules[name] = None
    real_import = builtins.__import__

    def recording_import(name, *args, **kwargs):
        if name.split(".")[0] in FORBIDDEN:
            ATTEMPTED.append(name)
        return real_import(name, *args, **kwargs)

    builtins.__import__ = recording_import


_block_absent_packages()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from selfplay_core.engines.gpu_config import (QWEN25_CODER, BatchShape, GPUConfig,  # noqa: E402
                                              LoraSettings, ModelShape, learner_memory)

PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "H800": 989e12, "A100": 312e12}
SMOKE_SHAPES = {
    name: ModelShape(name=f"smoke-{name}", hidden_size=h, num_layers=2, num_heads=4,
                     num_kv_heads=2, intermediate_size=2 * h, vocab_size=512,
                     tie_word_embeddings=tied)
    for name, h, tied in (("0.5b", 32, True), ("1.5b", 48, True), ("7b", 64, False))
}


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Budget:
    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def free_memory(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def build_model(shape: ModelShape, device: str, dtype: torch.dtype):
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


def env_info(device: str) -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "device": device}
    for mod in ("transformers", "accelerate", "peft"):
        try:
            info[mod] = importlib.import_module(mod).__version__
        except ImportError:
            info[mod] = None
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, gpu_count=torch.cuda.device_count(),
                    gpu_memory_gib=round(p.total_memory / 2**30, 1),
                    capability=f"{p.major}.{p.minor}")
    return info


def peak_flops(device: str, override_tflops: float | None) -> float | None:
    if override_tflops:
        return override_tflops * 1e12
    if device != "cuda":
        return None
    name = torch.cuda.get_device_name(0)
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


# ---- 1. learner throughput -----------------------------------------------------------------------
def learner_case(key: str, shape: ModelShape, *, device: str, dtype_name: str, batch: BatchShape,
                 n_rollouts: int, steps: int, peak: float | None, lora: LoraSettings | None) -> dict:
    from selfplay_core.rl.gpu import prepare_model, trainable_parameters
    from selfplay_core.rl.learner import Learner, LearnerConfig, Rollout

    dtype = getattr(torch, dtype_name)
    free_memory(device)
    t0 = time.monotonic()
    model = build_model(shape, device, dtype)
    model = prepare_model(model, dtype=dtype_name, precision="pure", gradient_checkpointing=True,
                          lora=lora)
    init_s = time.monotonic() - t0
    params = shape.num_params()
    learner = Learner(model, LearnerConfig(lr=1e-6, micro_batch_size=batch.micro_batch_size,
                                           max_completion_len=batch.max_completion_len))
    g = torch.Generator().manual_seed(0)
    old = -math.log(shape.vocab_size)  # ~ the random model's logprob: ratios start near 1

    def rollouts():
        out = []
        for i in range(n_rollouts):
            ids = torch.randint(0, shape.vocab_size, (batch.seq_len,), generator=g).tolist()
            p = batch.max_prompt_len
            out.append(Rollout(ids[:p], ids[p:], [old] * (len(ids) - p), 1.0 if i % 2 else -1.0))
        return out

    batch_rollouts = rollouts()
    tokens = n_rollouts * batch.seq_len
    learner.step(batch_rollouts)  # warm-up: kernels, allocator, optimizer states
    sync(device)
    t0 = time.monotonic()
    metrics = {}
    for _ in range(steps):
        metrics = learner.step(batch_rollouts)
    sync(device)
    dt = (time.monotonic() - t0) / steps
    tps = tokens / dt
    gpu_cfg = GPUConfig(device="cpu", engine="hf", dtype="float32") if device == "cpu" else \
        GPUConfig(engine="hf", dtype=dtype_name, gradient_checkpointing=True, lora=lora)
    est = learner_memory(gpu_cfg, shape, batch)
    out = {
        "shape": shape.name, "params": params, "trainable_params": trainable_parameters(model),
        "lora_r": lora.r if lora else None, "dtype": dtype_name, "gradient_checkpointing": True,
        "rollouts_per_step": n_rollouts, "seq_len": batch.seq_len,
        "micro_batch_size": batch.micro_batch_size, "tokens_per_step": tokens,
        "init_s": round(init_s, 2), "step_s": round(dt, 4), "tokens_per_s": round(tps, 1),
        # 6*P*tokens counts the forward+backward of a full fine-tune; a LoRA step skips the
        # weight gradients (~4*P*tokens) but the conventional figure is kept for comparison.
        "mfu": round(6 * params * tps / peak, 4) if peak else None,
        "loss_finite": bool(math.isfinite(metrics.get("learner/loss", float("nan")))),
        "estimated_peak_gib": round(est["total"], 3),
    }
    if device == "cuda":
        out["measured_peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    learner.accelerator.free_memory()  # the Accelerator keeps references to model and optimizer
    del learner, model, batch_rollouts
    free_memory(device)
    return out


# ---- 2. generation -------------------------------------------------------------------------------
def generation_case(shape: ModelShape, *, device: str, dtype_name: str, batch_size: int,
                    prompt_len: int, new_tokens: int) -> dict:
    dtype = getattr(torch, dtype_name)
    free_memory(device)
    model = build_model(shape, device, dtype).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, shape.vocab_size, (batch_size, prompt_len), generator=g).to(device)
    attn = torch.ones_like(ids)
    kw = dict(do_sample=True, temperature=1.0, top_p=1.0, pad_token_id=0, eos_token_id=None,
              attention_mask=attn)
    with torch.no_grad():
        model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
        sync(device)
        t0 = time.monotonic()
        out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kw)
        sync(device)
    dt = time.monotonic() - t0
    generated = (out.shape[1] - prompt_len) * batch_size
    res = {"shape": shape.name, "engine": "transformers.generate", "batch": batch_size,
           "prompt_len": prompt_len, "new_tokens": new_tokens, "seconds": round(dt, 3),
           "tokens_per_s": round(generated / dt, 1)}
    res["hf_engine"] = hf_engine_case(model, shape, batch_size, prompt_len, new_tokens)
    del model
    free_memory(device)
    return res


def _word_tokenizer(vocab_size: int):
    """A tokenizer with one word per token id ("t0" .. "tN"), so text prompts map to the random
    model's ids without any download."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", pad_token="t0",
                                   eos_token="t1")


def hf_engine_case(model, shape: ModelShape, batch_size: int, prompt_len: int,
                   new_tokens: int) -> dict:
    try:
        from selfplay_core.engines import hf as hf_mod
    except ImportError as e:
        return {"skipped": f"selfplay_core.engines.hf not importable here ({e})"}
    import inspect

    from selfplay_core.engines.base import SamplingParams

    cls = getattr(hf_mod, "HFEngine", None)
    if cls is None:
        return {"skipped": "selfplay_core.engines.hf has no HFEngine"}
    tok = _word_tokenizer(shape.vocab_size)
    params = inspect.signature(cls).parameters
    try:
        kwargs = {k: v for k, v in (("model", model), ("tokenizer", tok)) if k in params}
        engine = cls(**kwargs) if len(kwargs) == 2 else cls(model, tok)
    except Exception as e:  # noqa: BLE001 - an unknown constructor is a note, not a failure
        return {"skipped": f"could not build HFEngine(model, tokenizer): {type(e).__name__}: {e}"}
    g = torch.Generator().manual_seed(1)
    prompts = [" ".join(f"t{int(i)}" for i in torch.randint(2, shape.vocab_size, (prompt_len,),
                                                            generator=g))
               for _ in range(batch_size)]
    sp = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=0)
    try:
        engine.generate(prompts[:2], 1, SamplingParams(temperature=1.0, max_new_tokens=2, seed=0))
        t0 = time.monotonic()
        out = engine.generate(prompts, 1, sp)
        dt = time.monotonic() - t0
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}
    n = sum(len(c.token_ids) for group in out for c in group)
    return {"engine": "selfplay HFEngine", "seconds": round(dt, 3), "tokens": n,
            "tokens_per_s": round(n / dt, 1)}


# ---- 3. toy-world loop ---------------------------------------------------------------------------
def toy_loop_case(entry: str | None, iterations: int, device: str) -> dict:
    module_name, _, func_name = (entry or "selfplay_core.loop.headless:run_default_loop").partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        return {"skipped": f"{module_name} not importable in this checkout ({e}); the hook "
                           f"expects {module_name}.{func_name}(iterations, device) -> dict"}
    fn = getattr(module, func_name, None)
    if fn is None:
        return {"skipped": f"{module_name} has no {func_name}(iterations, device) -> dict"}
    t0 = time.monotonic()
    result = fn(iterations=iterations, device=device)
    return {"entry": f"{module_name}:{func_name}", "iterations": iterations,
            "seconds": round(time.monotonic() - t0, 2), "result": result}


# ---- driver ----------------------------------------------------------------------------------------
def run(args) -> dict:
    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    if args.smoke:
        shapes, dtype_name = SMOKE_SHAPES, "float32"
        if device == "cpu":
            torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    else:
        shapes, dtype_name = QWEN25_CODER, "bfloat16" if device == "cuda" else "float32"
    budget = Budget(args.budget_s)
    peak = peak_flops(device, args.peak_tflops)
    summary: dict = {"mode": "smoke" if args.smoke else "full", "env": env_info(device),
                     "peak_flops": peak, "learner": {}, "generation": {}, "toy_loop": None,
                     "notes": []}
    if device == "cpu" and not args.smoke:
        summary["notes"].append("no CUDA device: full shapes on CPU are far too slow; use --smoke")
        return summary
    if peak is None:
        summary["notes"].append("peak FLOP/s unknown for this device: MFU left null "
                                "(pass --peak-tflops)")
    # (key, shape, rollouts, batch) — sized for one 141 GB H200: 7B in pure bf16 needs ~61 GB
    # for weights, grads and AdamW states plus ~20 GB of logits/activations at 8k tokens a step.
    if args.smoke:
        sb = BatchShape(max_prompt_len=8, max_completion_len=8, micro_batch_size=2)
        cases = [(k, s, 4, sb, None) for k, s in shapes.items()]
        cases.append(("7b-lora", shapes["7b"], 4, sb, LoraSettings(r=4)))
        gen = [("0.5b", 2, 4, 4), ("7b", 2, 4, 4)]
    else:
        big = BatchShape(max_prompt_len=512, max_completion_len=512, micro_batch_size=8)
        b7 = BatchShape(max_prompt_len=512, max_completion_len=512, micro_batch_size=4)
        cases = [("0.5b", shapes["0.5b"], 32, big, None), ("1.5b", shapes["1.5b"], 16, big, None),
                 ("7b", shapes["7b"], 8, b7, None),
                 ("7b-lora", shapes["7b"], 8, b7, LoraSettings(r=16))]
        gen = [("0.5b", 64, 128, 128), ("7b", 32, 128, 128)]
    only = set(args.shapes.split(",")) if args.shapes else None
    # rough seconds each case needs on an H200, to skip rather than overrun the budget
    need = {"0.5b": 20, "1.5b": 30, "7b": 60, "7b-lora": 45}
    for key, shape, n, batch, lora in cases:
        if only and key.removesuffix("-lora") not in only:
            continue
        if not args.smoke and budget.left() < need[key] + 90:
            summary["learner"][key] = {"skipped": "time budget"}
            continue
        log(f"learner {key}: {shape.name}, {n} rollouts x {batch.seq_len} tokens")
        try:
            summary["learner"][key] = learner_case(key, shape, device=device, dtype_name=dtype_name,
                                                   batch=batch, n_rollouts=n, steps=args.steps,
                                                   peak=peak, lora=lora)
        except Exception as e:  # noqa: BLE001 - one failed case must not lose the others
            summary["learner"][key] = {"error": f"{type(e).__name__}: {e}",
                                       "trace": traceback.format_exc(limit=3)[-800:]}
            free_memory(device)
        log(f"  -> {summary['learner'][key]}")
    for key, bs, plen, new in gen:
        if only and key not in only:
            continue
        if not args.smoke and budget.left() < 60:
            summary["generation"][key] = {"skipped": "time budget"}
            continue
        log(f"generation {key}: batch {bs}, {plen} prompt + {new} new tokens")
        try:
            summary["generation"][key] = generation_case(shapes[key], device=device,
                                                         dtype_name=dtype_name, batch_size=bs,
                                                         prompt_len=plen, new_tokens=new)
        except Exception as e:  # noqa: BLE001
            summary["generation"][key] = {"error": f"{type(e).__name__}: {e}"}
            free_memory(device)
        log(f"  -> {summary['generation'][key]}")
    if args.smoke or budget.left() > 60:
        try:
            summary["toy_loop"] = toy_loop_case(args.toy_loop, args.toy_iterations, device)
        except Exception as e:  # noqa: BLE001
            summary["toy_loop"] = {"error": f"{type(e).__name__}: {e}",
                                   "trace": traceback.format_exc(limit=4)[-1200:]}
    else:
        summary["toy_loop"] = {"skipped": "time budget"}
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny shapes, one step: runs on CPU")
    p.add_argument("--cpu", action="store_true", help="ignore CUDA even if present")
    p.add_argument("--shapes", help="subset, e.g. 0.5b,7b")
    p.add_argument("--steps", type=int, default=3, help="timed learner steps per shape")
    p.add_argument("--budget-s", type=float, default=420.0)
    p.add_argument("--peak-tflops", type=float, help="override the device's dense bf16 peak")
    p.add_argument("--toy-loop", help="MODULE:FUNC for the toy-world loop hook")
    p.add_argument("--toy-iterations", type=int, default=3)
    p.add_argument("--out", help="also write the JSON summary here")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    summary = run(args)
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    summary["blocked_imports_attempted"] = sorted(set(ATTEMPTED))
    text = json.dumps(summary, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
