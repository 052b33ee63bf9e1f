"""Run a script of lab/ the way its docstring tells a user: a fresh interpreter with the
repository on PYTHONPATH, output captured."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "lab"


def run_lab_script(name: str, *args, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(LAB / name), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=timeout)
