import pytest


@pytest.fixture(scope="session")
def world():
    from selfplay_core.toyworld.splits import build_world

    return build_world(0)
