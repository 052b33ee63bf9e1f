"""The self-play loop with `engine.backend: vllm`, against the PROTOCOL TEST DOUBLE of the vLLM
server (fake_vllm_server.py — not vLLM): every generation goes to the server, the learner stays
in this process, and after the update the new weights reach the server (filesystem sync: a HF
checkpoint written into the served folder, then `reload_weights`). NCCL sync cannot run on a CPU
machine and is not exercised here (its protocol is in test_vllm_protocol.py).

Also: an unreachable server stops `selfplay run` with one line before anything starts; the
GPU config's dry run shows the vllm engine; a run with `gpu.launch_server` starts the server
itself, serves its own copy of the weights and stops the server at the end."""

import json
import os
import socket
import stat
import sys
from pathlib import Path

import pytest
import torch

from fake_vllm_server import FakeVLLM, toy_loop_script

from selfplay_cli.main import main

FAKE = Path(__file__).with_name("fake_vllm_server.py")
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loop_sets(model_dir, out_dir, url):
    return [f"model.path={model_dir}", f"out_dir={out_dir}", "iterations=1", "updates_per_iteration=1",
            "engine.backend=vllm", f"engine.vllm_url={url}",
            "method.goalposts_per_iteration=2", "method.proposals_per_anchor=2",
            "teacher.rejection_sampling=false",  # the scripted proposals are near-duplicates
            "student.samples_per_task=2", "student.batch_size=16",
            "eval.n=2", "eval.verdict_n=null", "eval.ks=[1, 2]", "eval.max_problems=4", "eval.goalpost_every=1",
            "eval.goalpost_k=2", "world.goalpost_k=2", "world.max_goalposts=3",
            # the scripted server solves no goalpost; the frontier rule would also ask for lemmas
            # it solves in band, so it keeps none: mine plainly unsolved ones
            "world.goalpost_rule=unsolved",
            "engine.max_new_tokens_teacher=64", "engine.max_new_tokens_student=24",
            "learner.lr=1e-3", "sandbox.workers=2", "tracking.run_name=vllm"]


def weights(path):
    from safetensors.torch import load_file

    return load_file(str(Path(path) / "model.safetensors"))


def test_loop_generates_on_the_server_and_pushes_weights_after_the_update(micro_model_dir, tmp_path,
                                                                          executor):
    from mlflow.tracking import MlflowClient
    from transformers import AutoTokenizer

    from selfplay_core.config import load_config
    from selfplay_core.loop.driver import run_selfplay

    served = tmp_path / "served"
    served.mkdir()
    fake = FakeVLLM(model=str(served), served_dir=str(served), script=toy_loop_script,
                    tokenizer=AutoTokenizer.from_pretrained(str(micro_model_dir))).start()
    try:
        cfg = load_config(None, loop_sets(micro_model_dir, tmp_path / "runs", fake.url)
                          + [f"engine.served_model_dir={served}"])
        summary = run_selfplay(cfg, executor=executor)
    finally:
        fake.stop()

    paths = fake.paths()
    prompts = [p for m, path, b in fake.requests if path == "/v1/completions" for p in b["prompt"]]
    # Teacher, student and evaluation prompts all went to the server.
    assert any("### Variant: easier" in p for p in prompts)
    assert any("### Variant: harder" in p for p in prompts)
    assert any("Return x plus" in p and p.rstrip().endswith("def f(x):") for p in prompts)
    # One update -> one filesystem sync: a complete HF folder, then reload, then a cache reset;
    # generation (the evaluation after the update) continued on the new weights.
    assert paths.count("/collective_rpc") == 1 and len(fake.reloads) == 1
    i = paths.index("/collective_rpc")
    assert paths[i + 1] == "/reset_prefix_cache"
    assert "/v1/completions" in paths[:i] and "/v1/completions" in paths[i + 1:]
    assert {"config.json", "model.safetensors"} <= set(fake.reloads[0]["files"])
    # What the server reloaded is the learner's updated model, the run's final checkpoint.
    pushed, final, start = weights(served), weights(summary.checkpoint), weights(micro_model_dir)
    assert all(torch.equal(pushed[k], final[k]) for k in final)
    assert any(not torch.equal(final[k], start[k]) for k in start)

    client = MlflowClient(summary.tracking_uri)
    run = client.get_run(summary.run_id)
    assert run.data.tags["engine"] == "vllm" and run.info.status == "FINISHED"
    hist = client.get_metric_history(summary.run_id, "engine/weight_version")
    assert [(m.step, m.value) for m in hist] == [(1, 1.0)]
    # The train/inference mismatch of the update's first epoch is logged (the double's logprobs
    # are not the model's, so it is large here; test_vllm_real.py measures a real server's).
    mismatch = client.get_metric_history(summary.run_id, "mismatch/logprob_abs_diff_mean")
    assert [m.step for m in mismatch] == [1] and mismatch[0].value > 0.1
    acc = client.get_metric_history(summary.run_id, "teacher/lemma/accepted")
    assert [m.value for m in acc] == [4.0]  # the scripted proposals were valid


def test_unreachable_server_is_one_error_before_the_run_starts(micro_model_dir, tmp_path, capsys):
    url = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "runs"
    code = main(["run", "--no-prefect", "--set", f"model.path={micro_model_dir}", "--set",
                 f"out_dir={out}", "--set", "engine.backend=vllm", "--set", f"engine.vllm_url={url}"])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert url in lines[0] and "selfplay vllm-serve" in lines[0] and "launch_server" in lines[0]
    assert not out.exists()  # no run directory, no MLflow store: nothing started

    # The same check guards a direct build_context (the Prefect flow's path), before the model loads.
    from selfplay_core.config import load_config
    from selfplay_core.loop.context import build_context
    from selfplay_core.loop.engine_setup import EngineSetupError

    cfg = load_config(None, [f"model.path={micro_model_dir}", "engine.backend=vllm",
                             f"engine.vllm_url={url}"])
    with pytest.raises(EngineSetupError, match="does not answer"):
        build_context(cfg, tmp_path / "ctx")


def test_gpu_config_dry_run_shows_the_vllm_engine(capsys):
    code = main(["run", "--config", str(ROOT / "configs" / "qwen2.5-coder-7b-gasp.yaml"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "engine: vllm server at http://127.0.0.1:8000, started by the run" in out
    assert "world: lcb" in out and "humanevalplus" in out
    assert "vllm-server: `selfplay vllm-serve`" in out and "fits: yes" in out


def test_filesystem_sync_without_a_served_folder_fails_before_the_run(micro_model_dir, tmp_path):
    from selfplay_core.config import load_config
    from selfplay_core.loop.context import build_context
    from selfplay_core.loop.engine_setup import EngineSetupError

    fake = FakeVLLM(model="m").start()
    try:
        cfg = load_config(None, [f"model.path={micro_model_dir}", "engine.backend=vllm",
                                 f"engine.vllm_url={fake.url}"])
        with pytest.raises(EngineSetupError, match="set engine.served_model_dir"):
            build_context(cfg, tmp_path / "ctx")
    finally:
        fake.stop()


def test_launch_server_serves_a_copy_syncs_it_and_stops_the_server(micro_model_dir, tmp_path,
                                                                   executor, monkeypatch):
    """gpu.launch_server (the GPU config's setting): the run starts `vllm serve` from
    $SELFPLAY_VLLM_VENV (here a fake venv running the test double) on run_dir/served_model."""
    from selfplay_core.config import load_config
    from selfplay_core.loop.driver import run_selfplay

    py = tmp_path / "vllm-venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "vllm-venv" / "lib" / "python3.11" / "site-packages" / "vllm-0.31.0.dist-info").mkdir(
        parents=True)  # the CUDA build, as far as the launcher can tell
    events, args_file = tmp_path / "events.jsonl", tmp_path / "args.json"
    monkeypatch.setenv("SELFPLAY_VLLM_VENV", str(py.parent.parent))
    monkeypatch.setenv("FAKE_VLLM_SCRIPT", "toy-loop")
    monkeypatch.setenv("FAKE_VLLM_EVENTS", str(events))
    monkeypatch.setenv("FAKE_VLLM_ARGS_FILE", str(args_file))
    url = f"http://127.0.0.1:{free_port()}"
    gpu = ["gpu.device=cuda", "gpu.engine=vllm", "gpu.launch_server=true", "gpu.num_gpus=2",
           "gpu.learner_gpus=1", "gpu.rollout_gpus=1", "gpu.dtype=float32",
           "gpu.gradient_checkpointing=false", "plan.model_shape=0.5b"]
    cfg = load_config(None, loop_sets(micro_model_dir, tmp_path / "runs", url) + gpu)
    summary = run_selfplay(cfg, executor=executor)

    served = Path(summary.run_dir) / "served_model"
    argv = json.loads(args_file.read_text())["argv"]
    assert argv[argv.index("--model") + 1] == str(served)      # its own copy, not the model
    assert argv[argv.index("--logprobs-mode") + 1] == "processed_logprobs"
    assert "--weight-transfer-config" not in argv              # filesystem flags
    reloads = [json.loads(l)["reload"] for l in events.read_text().splitlines()]
    assert len(reloads) == 1 and "model.safetensors" in reloads[0]["files"]
    final = weights(summary.checkpoint)
    assert all(torch.equal(weights(served)[k], final[k]) for k in final)
    assert (Path(summary.run_dir) / "vllm-server.log").exists()
    with socket.socket() as s:  # the run stopped its server
        assert s.connect_ex(("127.0.0.1", int(url.rsplit(":", 1)[1]))) != 0
    assert weights(micro_model_dir).keys() == final.keys()
    assert os.environ.get("CUDA_VISIBLE_DEVICES") is None  # only the server's env got it
