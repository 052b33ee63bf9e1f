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

