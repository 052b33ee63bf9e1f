"""lab/verdict_reeval.py end to end on the committed toy checkpoint: a "run" whose end
checkpoint is the start checkpoint itself scores exactly the same (one seed for both), so its
verdict is a zero difference; a folder with no checkpoint is one clear error before sampling."""

import json
import shutil
from pathlib import Path

from lab.tests.run_script import run_lab_script


def _run(*args):
    return run_lab_script("verdict_reeval.py", *args, timeout=600)


def test_an_unchanged_checkpoint_has_a_zero_paired_difference(tmp_path):
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    run = tmp_path / "gasp-s0"
    shutil.copytree(ASSET_DIR, run / "checkpoints" / "iter-0002")
    r = _run(run, "--n", 8, "--problems", 24, "--json", tmp_path / "c.json")
    assert r.returncode == 0, r.stderr[-2000:]
    row = next(line for line in r.stdout.splitlines() if line.startswith(f"| {run} |"))
    assert "(+0.000 ± 0.000) | no clear change |" in row
    counts = json.loads((tmp_path / "c.json").read_text())
    assert counts["start"] == counts[str(run)] and len(counts["start"]) == 24
    assert any(c > 0 for _, c in counts["start"].values())     # it sampled and verified


def test_a_folder_without_checkpoints_is_one_clear_error(tmp_path):
    r = _run(tmp_path)
    assert r.returncode != 0
    assert "no checkpoints/iter-*" in r.stderr and "Traceback" not in r.stderr
