"""The shipped SPICE / SCOPE and CompassPlay configs: the tiny ones load with the method's
settings, the 7B ones pass the CLI's dry run, and bad corpus settings fail at validation with
one message naming the key."""

import subprocess
import sys
from pathlib import Path

import pytest

from selfplay_core.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_tiny_configs():
    spice = load_config(ROOT / "configs/spice-tiny-cpu.yaml")
    assert (spice.method.name, spice.method.advantage, spice.method.invalid_penalty) == ("spice", "dr_grpo", -0.1)
    assert spice.learner.loss_agg == "seq_sum_norm" and spice.method.rubric is None
    scope = load_config(ROOT / "configs/scope-tiny-cpu.yaml")
    assert scope.method.rubric is not None and scope.method.rubric.pass_score == 0.6
    compass = load_config(ROOT / "configs/compassplay-tiny-cpu.yaml")
    assert (compass.method.name, compass.method.reference, compass.method.gradient_layers) == ("compassplay", "real", 1)


@pytest.mark.parametrize("name", ["qwen2.5-coder-7b-spice.yaml", "qwen2.5-coder-7b-compassplay.yaml"])
def test_the_7b_configs_pass_the_dry_run(name):
    r = subprocess.run([sys.executable, "-m", "selfplay_cli.main", "run", "--config", f"configs/{name}",
                        "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "resolved plan:" in r.stdout and "fits: yes" in r.stdout


@pytest.mark.parametrize("sets,message", [
    (["method.corpus={source: folder, path: /nonexistent/code}"], "method.corpus.path /nonexistent/code: folder not found"),
    (["method.corpus={source: hub}"], "method.corpus.path is required for source hub"),
    (["method.corpus={source: toy, path: x}"], "method.corpus.path is for source folder or hub"),
    (["method.prompt=chat"], "method.prompt"),
    (["student.replay_tasks_per_iteration=2"], "method spice does not replay"),
])
def test_bad_spice_settings_name_the_key(sets, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_config(None, ["method=spice", *sets])
