"""An engine error ends a command with one line naming the problem, never a traceback: every
engine raises subclasses of the one `engines.errors.EngineError` (the hf engine's own class
used to escape the CLI as a traceback)."""

import os
import subprocess
import sys
from pathlib import Path

from selfplay_core.engines import errors, hf

ROOT = Path(__file__).resolve().parents[1]


def test_one_engine_error_class():
    assert hf.EngineError is errors.EngineError
    assert issubclass(hf.InvalidRequest, errors.EngineError)
    assert issubclass(hf.InvalidRequest, ValueError)   # a bad request is a bad value, as before


def test_a_prompt_longer_than_the_context_is_one_line(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "selfplay_cli.main", "run", "--no-prefect",
         "--set", f"out_dir={tmp_path / 'runs'}", "--set", "engine.max_new_tokens_student=100000",
         "--set", f"tracking.mlflow_uri=sqlite:///{tmp_path / 'mlflow.db'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SELFPLAY_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    errors_ = [line for line in r.stderr.splitlines() if line.startswith("selfplay run: error:")]
    assert len(errors_) == 1, r.stderr[-3000:]
    assert "max_new_tokens 100000 exceeds the model's context" in errors_[0]
    assert "lower the max_new_tokens setting" in errors_[0]
