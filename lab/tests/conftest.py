"""The lab's tests (`make test-lab`) run with the product suite's settings: offline, no
telemetry, caches under pytest's cache dir, the shared fixtures (tests/conftest.py). The
product suite never imports the lab; the lab may import the product and its test support."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.conftest import *  # noqa: E402,F401,F403  (fixtures are found by name in this module)
