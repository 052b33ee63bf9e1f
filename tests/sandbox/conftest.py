import pytest

from selfplay_core.sandbox import Executor, SandboxConfig


@pytest.fixture(scope="session")
def ex():
    """A two-worker executor shared by the sandbox tests (workers stay warm)."""
    with Executor(SandboxConfig(workers=2)) as e:
        yield e


@pytest.fixture(scope="session")
def ex1():
    """One worker, so 'the next sample' really runs on the worker a hack just used."""
    with Executor(SandboxConfig(workers=1)) as e:
        yield e
