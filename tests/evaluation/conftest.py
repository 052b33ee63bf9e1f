import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _expected_cache(request):
    """Keep computed expected outputs / calibrations in pytest's cache dir (not ~/.cache), so
    reruns are fast and tests never depend on a user's cache."""
    if not os.environ.get("SELFPLAY_CACHE"):
        os.environ["SELFPLAY_CACHE"] = str(request.config.cache.mkdir("selfplay-cache"))
    yield


@pytest.fixture(scope="session")
def executor():
    from selfplay_core.sandbox import Executor, SandboxConfig

    with Executor(SandboxConfig(workers=2)) as ex:
        yield ex


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory):
    """The toy world's micro model (a real transformers checkpoint, seconds to build)."""
    from selfplay_core.toyworld.bootstrap import MICRO_TEST_CONFIG, BootstrapConfig, bootstrap_toy_model

    out = tmp_path_factory.mktemp("micro") / "model"
    return bootstrap_toy_model(BootstrapConfig(**MICRO_TEST_CONFIG), out_dir=out, progress=False,
                               log=lambda m: None)
