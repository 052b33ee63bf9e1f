import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

# A bootstrap small enough for unit tests (seconds), through the real code path.
MICRO = dict(n_examples=600, tokenizer_sample=600, vocab_size=400, hidden_size=32, num_layers=1,
             num_heads=2, num_kv_heads=1, ffn_size=64, epochs=1.0, batch_size=16)


@pytest.fixture(scope="session")
def executor():
    from selfplay_core.sandbox import Executor, SandboxConfig

    with Executor(SandboxConfig(workers=2)) as ex:
        yield ex


@pytest.fixture(scope="session")
def world():
    from selfplay_core.toyworld.splits import build_world

    return build_world(0)


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory):
    from selfplay_core.toyworld.bootstrap import BootstrapConfig, bootstrap_toy_model

    out = tmp_path_factory.mktemp("micro") / "model"
    return bootstrap_toy_model(BootstrapConfig(**MICRO), out_dir=out, progress=False, log=lambda m: None)
