import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")



@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory):
    from selfplay_core.toyworld.bootstrap import MICRO_TEST_CONFIG, BootstrapConfig, bootstrap_toy_model

    # One folder per session, shared by tests/toyworld and tests/engines: the second fixture
    # finds the first one's finished model (bootstrap returns a complete folder as cached).
    out = tmp_path_factory.getbasetemp() / "micro-model"
    return bootstrap_toy_model(BootstrapConfig(**MICRO_TEST_CONFIG), out_dir=out, progress=False, log=lambda m: None)
