"""The run's generation engine, from `engine.backend`: how it is built, checked before the run
starts, and handed new weights after every learner update.

* `hf` — `HFEngine` in the learner's process; new weights are copied in place
  (`HFEngine.load_weights`, no disk round trip).
* `vllm` — `VLLMEngine` against a vLLM server at `engine.vllm_url`. The server is either already
  running (`selfplay vllm-serve MODEL ...`) or, with `gpu.launch_server: true`, started by the run
  on the plan's rollout GPUs and stopped when the run ends. Before anything else the server must
  answer `/health` and `/v1/models`, or the run stops with one error naming the URL and how to
  start it. After every update the learner (which stays in this process, under accelerate)
  pushes its weights: NCCL through TRL's client where trl + vllm + CUDA are importable here,
  else a checkpoint written into the served folder and a `reload_weights` call (`filesystem`),
  or a LoRA adapter (`lora`) — `gpu.weight_sync` picks, `auto` by that order. On resume the
  server first receives the checkpoint's weights.
* colocated (`gpu.vllm_placement: colocated`, one GPU): the server runs on the learner's GPU
  with `--enable-sleep-mode` and the share of memory the plan sized for the learner's steady
  state. For each update it sleeps (level 1: weights to CPU memory, KV cache freed), the learner
  steps and releases its CUDA cache, then the server wakes its weights, receives the new ones,
  and only then re-allocates its KV cache (`VLLMSetup.learner_turn` + `push`).
"""

from __future__ import annotations

import importlib.util
import logging
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from selfplay_core.engines.errors import EngineError
from selfplay_core.engines.gpu_config import vllm_lora_rank
from selfplay_core.engines.hf import HFEngine
from selfplay_core.engines.vllm import VLLMEngine, VLLMEngineConfig, _is_peft, write_checkpoint
from selfplay_core.engines.vllm_server import ServeOptions, VLLMLaunchError, launch
from selfplay_core.roles.teacher import teacher_prompt
from selfplay_core.solve import student_prompt_for

log = logging.getLogger(__name__)


class EngineSetupError(EngineError):
    """The engine cannot be used for this run (caught before the run starts)."""


def serve_hint(cfg, mode: str | None = None) -> str:
    url = urlsplit(cfg.engine.vllm_url or "http://127.0.0.1:8000")
    sync = mode if mode and mode != "auto" else "filesystem"
    model = "SERVED_FOLDER" if sync == "filesystem" else cfg.model.path
    extra = f" and set engine.served_model_dir=SERVED_FOLDER (a copy of {cfg.model.path})" \
        if sync == "filesystem" else ""
    return (f"start it with `selfplay vllm-serve {model} --host {url.hostname} --port "
            f"{url.port or 8000} --weight-sync {sync}`{extra}, or set gpu.launch_server: true so "
            "the run starts it")


def pad_id_of(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def _importable(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def sync_mode(cfg, *, peft: bool) -> str:
    """The concrete weight-sync path for a vllm engine (gpu.weight_sync, `auto` resolved)."""
    want = cfg.gpu.weight_sync if cfg.gpu is not None else "auto"
    if want != "auto":
        return want
    import torch

    if _importable("trl") and _importable("vllm") and torch.cuda.is_available():
        return "nccl"
    if peft:
        return "lora"
    return "filesystem"


def make_hf_engine(cfg, model_dir: Path):
    import torch

    return HFEngine(str(model_dir), batch_size=cfg.engine.batch_size,
                    dtype=getattr(torch, cfg.model.dtype))


def launches_server(cfg) -> bool:
    return cfg.engine.backend == "vllm" and cfg.gpu is not None and cfg.gpu.launch_server


def check_server(cfg, engine=None) -> dict:
    """One health check of the configured vLLM server; EngineSetupError if it fails."""
    engine = engine or VLLMEngine(VLLMEngineConfig(base_url=cfg.engine.vllm_url))
    try:
        return engine.check_health()
    except EngineError as e:
        raise EngineSetupError(f"engine.backend is vllm but the server at {cfg.engine.vllm_url} "
                               f"does not answer ({e}); {serve_hint(cfg)}") from None


class VLLMSetup:
    """A vllm engine's weight path for this run: the server it may have launched, and the push."""

    def __init__(self, cfg, policy, tokenizer, run_dir: Path, model_dir: Path, resume: bool):
        self.server = None
        self.colocated = cfg.gpu is not None and cfg.gpu.vllm_placement == "colocated"
        self.asleep = False
        mode = sync_mode(cfg, peft=_is_peft(policy))
        served = cfg.engine.served_model_dir
        if launches_server(cfg) and mode == "filesystem" and not served:
            served = str(run_dir / "served_model")
        if mode == "filesystem" and not served:
            raise EngineSetupError("weight sync 'filesystem' rewrites the folder the vLLM server "
                                   "serves: set engine.served_model_dir to it (serve a copy of "
                                   f"{cfg.model.path}: it is overwritten), or gpu.weight_sync "
                                   "nccl/lora")
        if launches_server(cfg):
            served_model = str(model_dir)
            if mode == "filesystem":
                write_checkpoint(policy, Path(served), tokenizer=tokenizer)
                served_model = served
                resume = False  # the served folder already holds the current weights
            self.server = self._launch(cfg, served_model, mode, run_dir)
        self.engine = VLLMEngine(VLLMEngineConfig(
            base_url=cfg.engine.vllm_url, weight_sync=mode, served_model_dir=served,
            lora_dir=str(run_dir / "lora") if mode == "lora" else None,
            request_timeout_s=cfg.engine.request_timeout_s))
        try:
            check_server(cfg, self.engine)
        except EngineSetupError:
            self.close()
            raise
        self.mode = mode
        log.info("vllm engine at %s serving %s, weight sync %s", cfg.engine.vllm_url,
                 self.engine.served_model, mode)
        if resume:  # the server still serves the starting weights: hand it the checkpoint's
            self.push(policy, tokenizer)

    @staticmethod
    def _launch(cfg, model: str, mode: str, run_dir: Path):
        try:
            return launch(serve_options(cfg, model, mode), wait_timeout_s=cfg.engine.server_wait_s,
                          log_path=run_dir / "vllm-server.log")
        except VLLMLaunchError as e:
            raise EngineSetupError(f"gpu.launch_server: {e}") from None

    @contextmanager
    def learner_turn(self):
        """Around the learner's update: a colocated server sleeps (level 1) so the step has the
        GPU; `push` wakes it. A step that fails wakes it fully, so the server stays usable."""
        if not self.colocated:
            yield
            return
        self.engine.sleep(level=1)
        self.asleep = True
        try:
            yield
        except BaseException:
            self.engine.wake_up()
            self.asleep = False
            raise

    def push(self, model, tokenizer) -> dict:
        """New weights to the server. Colocated and asleep: wake the weights first (the sync
        writes into them), then the KV cache, so the cache is re-allocated only after the
        learner's memory is back to its steady state."""
        out = {}
        waking = self.asleep
        if waking:
            t0 = time.perf_counter()
            self.engine.wake_up(tags=["weights"])
            out["engine/wake_weights_s"] = time.perf_counter() - t0
        try:
            info = self.engine.sync_weights(model, tokenizer=tokenizer)
        finally:
            if waking:
                t0 = time.perf_counter()
                self.engine.wake_up(tags=["kv_cache"])
                out["engine/wake_kv_cache_s"] = time.perf_counter() - t0
                self.asleep = False
        return {**out, "engine/weight_sync_s": float(info["seconds"]),
                "engine/weight_version": float(info["version"])}

    def close(self) -> None:
        try:
            self.engine.close()
        finally:
            if self.server is not None:
                self.server.stop()
                self.server = None


def serve_options(cfg, model: str, mode: str):
    """The `selfplay vllm-serve` options of a server the run launches: the plan's rollout GPUs
    (the learner's, colocated, with sleep mode) and memory share, a LoRA rank vLLM accepts."""
    gpu = cfg.gpu
    url = urlsplit(cfg.engine.vllm_url)
    plan = cfg.resolved_plan()
    rollout = plan.gpus.get("rollout") if plan is not None else None
    return ServeOptions(model=model, host=url.hostname or "127.0.0.1", port=url.port or 8000,
                        gpus=",".join(map(str, rollout)) if rollout else None,
                        tensor_parallel_size=gpu.tensor_parallel_size,
                        gpu_memory_utilization=plan.vllm_memory_utilization,
                        max_model_len=gpu.max_model_len, dtype=gpu.dtype, weight_sync=mode,
                        max_lora_rank=vllm_lora_rank(gpu.lora.r) if gpu.lora else 16,
                        enable_sleep_mode=gpu.vllm_placement == "colocated", seed=cfg.seed)


def context_length(cfg, engine, model_dir: Path) -> int | None:
    """Tokens a prompt plus its completion may take: the served max_model_len for vllm
    (gpu.max_model_len), else the model's own window."""
    if cfg.engine.backend == "hf":
        return int(engine.max_length)
    if cfg.gpu is not None:
        return int(cfg.gpu.max_model_len)
    try:
        from transformers import AutoConfig

        return int(getattr(AutoConfig.from_pretrained(str(model_dir)), "max_position_embeddings"))
    except Exception:  # noqa: BLE001 - unknown: no filtering
        return None


def prompt_fits(cfg, tokenizer, limit: int | None):
    """fits(problem, role) for the real-data world: the role's prompt plus its generation budget
    within `limit` tokens."""
    if limit is None:
        return None
    e = cfg.engine

    def fits(problem, role: str) -> bool:
        if role == "teacher":
            text = teacher_prompt(problem.prompt or "", problem.metadata.get("reference", ""), "f", "easier")
            budget = e.max_new_tokens_teacher
        else:
            text, budget = student_prompt_for(problem), e.max_new_tokens_student
        return len(tokenizer(text, add_special_tokens=False)["input_ids"]) + budget <= limit

    return fits


def describe_setup(cfg) -> str:
    """What `selfplay run --dry-run` says about the engine and the world."""
    e, w = cfg.engine, cfg.world
    if e.backend == "hf":
        engine = f"engine: hf (transformers in the learner process, batch {e.batch_size}); " \
                 "weights copied in place after every update"
    else:
        want = cfg.gpu.weight_sync if cfg.gpu is not None else "auto"
        sync = ("auto (nccl when trl+vllm+CUDA import in the learner, else lora for a LoRA "
                "learner, else filesystem)" if want == "auto" else want)
        if launches_server(cfg):
            served = e.served_model_dir or "RUN_DIR/served_model"
            where = (f"started by the run (`selfplay vllm-serve`, log RUN_DIR/vllm-server.log; "
                     f"filesystem sync serves {served})")
        else:
            where = "already running (checked before the run starts)"
        engine = (f"engine: vllm server at {e.vllm_url}, {where}; weight sync after every "
                  f"update: {sync}")
    if w.name == "toy":
        world = "world: toy (synthetic tasks; goalposts mined from the depth-3/4 pool)"
    else:
        data = w.data or (f"hub release {w.lcb_release}" if w.lcb_release else
                          "$SELFPLAY_DATA/livecodebench (public tests)")
        gps = f"goalposts from {w.goalposts}" if w.goalposts else \
            f"goalposts mined with pass@{w.goalpost_k} = 0"
        world = (f"world: lcb from {data}; {gps} among LCB problems before 2024-08-01 (also the "
                 f"real training split); eval: {', '.join(w.eval_sets)} (LCB window "
                 "2024-08-01..2025-02-01)")
    return f"{engine}\n{world}"
