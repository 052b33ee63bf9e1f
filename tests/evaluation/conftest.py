import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _expected_cache(request):
    """Keep computed expected outputs / calibrations in pytest's cache dir (not ~/.cache), so
    reruns are fast and tests never depend on a user's cache."""
    if not os.environ.get("SELFPLAY_CACHE"):
        os.environ["SELFPLAY_CACHE"] = str(request.config.cache.mkdir("selfplay-cache"))
    yield
