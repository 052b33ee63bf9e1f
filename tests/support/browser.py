"""A page as a person sees it: headless Chromium (Debian's package) renders a URL after its
scripts ran, for a screenshot a person can look at and the rendered DOM a test can read."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

# Chromium's own connections (updates, sync, field trials) are refused on an offline machine,
# many at a time; these flags keep it to the page asked for.
_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise RuntimeError("chromium is not installed: `sh infra/system-packages.sh test` installs it")
    return exe


def render(url: str, screenshot: Path, *, width: int = 1400, height: int = 2200,
           budget_ms: int = 20000) -> str:
    """Save a screenshot of `url` and return its rendered DOM (both after `budget_ms` of the
    page's own time, so its scripts and API calls have run)."""
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    common = [f"--window-size={width},{height}", f"--virtual-time-budget={budget_ms}"]
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium(), *_FLAGS, f"--user-data-dir={profile}/a", *common,
                        f"--screenshot={screenshot}", url], capture_output=True, timeout=240)
        dom = subprocess.run([chromium(), *_FLAGS, f"--user-data-dir={profile}/b", *common,
                              "--dump-dom", url], capture_output=True, text=True, timeout=240)
    return dom.stdout
