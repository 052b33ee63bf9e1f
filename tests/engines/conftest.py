import pytest

from fake_vllm_server import FakeVLLM


@pytest.fixture()
def fake_vllm(tmp_path):
    """A protocol test double of the vLLM server (not vLLM) on a free loopback port."""
    served = tmp_path / "served"
    served.mkdir()
    server = FakeVLLM(model=str(served), served_dir=str(served)).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory):
    from selfplay_core.toyworld.bootstrap import MICRO_TEST_CONFIG, BootstrapConfig, bootstrap_toy_model

    out = tmp_path_factory.mktemp("micro") / "model"
    return bootstrap_toy_model(BootstrapConfig(**MICRO_TEST_CONFIG), out_dir=out, progress=False, log=lambda m: None)
