"""What the tests that drive `selfplay run` as a subprocess share: a tiny GASP config on the toy
checkpoint (seconds per iteration), the command line, and an environment whose Prefect home is
the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def tiny_config(path: Path, model_dir: Path, *, iterations: int, run_name: str, **eval_keys) -> Path:
    cfg = {"iterations": iterations, "model": {"path": str(model_dir)},
           "method": {"name": "gasp", "goalposts_per_iteration": 3, "proposals_per_anchor": 2},
           "student": {"samples_per_task": 4, "batch_size": 32},
           "eval": {"n": 2, "ks": [1, 2], "max_problems": 8, "goalpost_every": 1, "goalpost_k": 2,
                    **eval_keys},
           "world": {"goalpost_k": 4, "max_goalposts": 6},
           "engine": {"max_new_tokens_teacher": 192, "max_new_tokens_student": 48},
           "learner": {"lr": 1e-3}, "sandbox": {"workers": 2}, "tracking": {"run_name": run_name}}
    path.write_text(yaml.safe_dump(cfg))
    return path


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "selfplay_cli.main", "run", *args]


def cli_env(prefect_home: Path, *, temporary_server: bool = False) -> dict:
    """The environment of a `selfplay run` child: this checkout first on the path, its own Prefect
    home; `temporary_server`: no PREFECT_API_URL, so the CLI starts (and owns) its own server."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env["PREFECT_HOME"] = str(prefect_home)
    if temporary_server:
        env.pop("PREFECT_API_URL", None)
    return env


def run_to_end(args: list[str], env: dict, log: Path, timeout_s: float = 600) -> None:
    with open(log, "w") as f:
        r = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT, timeout=timeout_s)
    assert r.returncode == 0, log.read_text()[-3000:]
