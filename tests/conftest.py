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

import pytest  # noqa: E402


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
def executor():
    """A warm two-worker executor for tests outside tests/sandbox."""
    from selfplay_core.sandbox import Executor, SandboxConfig

    with Executor(SandboxConfig(workers=2)) as ex:
        yield ex


@pytest.fixture(scope="session", autouse=True)
def _stop_prefect_temporary_server():
    """Stop Prefect's temporary API server (started by the first flow called without
    PREFECT_API_URL) while pytest still captures output.

    Why: Prefect stops that server from an atexit hook, which logs "Stopping temporary server"
    through Prefect's console handler. The handler holds the stream that was sys.stderr when
    Prefect configured logging, i.e. pytest's capture file, which pytest has closed by then: the
    result was a "--- Logging error --- ValueError: I/O operation on closed file" traceback after
    the test summary. Stopping it here (as Prefect's own test fixtures do) leaves nothing for
    the hook to log."""
    yield
    server = sys.modules.get("prefect.server.api.server")
    if server is not None:
        server.SubprocessASGIServer().stop()
