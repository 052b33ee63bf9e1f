"""lab/teacher_bootstrap.py: a short continuation end to end on the committed toy
checkpoint (a row per check, a checkpoint a run can load whose weights moved), and bad input as
one clear error before any training."""

import json
from pathlib import Path

import pytest

from lab.tests.run_script import run_lab_script


def _run(*args):
    return run_lab_script("teacher_bootstrap.py", *args, timeout=900)


def test_a_short_continuation_measures_each_check_and_saves_a_moved_checkpoint(tmp_path):
    import torch
    from safetensors.torch import load_file

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    r = _run("--out", tmp_path, "--steps", 6, "--every", 3, "--prompts", 3, "--heldout", 4,
             "--batch-size", 4)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads((tmp_path / "results.json").read_text())
    assert [row["step"] for row in rows] == [0, 3, 6]
    for row in rows:
        assert row["lemma d3->2"]["prompts"] == 3 and 0 <= row["heldout"]["1"] <= 1
    table = [l for l in r.stdout.splitlines() if l.startswith("| ") and l[2].isdigit()]
    assert [l.split(" | ")[0] for l in table] == ["| 0", "| 3", "| 6"]
    saved, start = tmp_path / "model", Path(ASSET_DIR)
    meta = json.loads((saved / "bootstrap.json").read_text())
    assert meta["continued"]["steps_done"] == 6 and meta["continued"]["from"] == str(start)
    a, b = load_file(saved / "model.safetensors"), load_file(start / "model.safetensors")
    assert a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)


def test_deep_pool_checks_measure_the_depth_5_lemma_and_the_depth_4_lift(tmp_path):
    r = _run("--out", tmp_path, "--steps", 2, "--every", 2, "--prompts", 2, "--heldout", 2,
             "--batch-size", 4, "--deep-pool", 12, "--teacher-tokens", 256)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads((tmp_path / "results.json").read_text())
    for row in rows:
        assert row["lemma d5->4"]["prompts"] == 2 and row["lift d4->5"]["prompts"] == 2
    header = next(l for l in r.stdout.splitlines() if l.startswith("| step"))
    assert "lemma d5->4 | lift d4->5" in header
    table = [l for l in r.stdout.splitlines() if l.startswith("| ") and l[2].isdigit()]
    assert all(l.count("|") == header.count("|") for l in table)


def test_a_depth_6_teacher_phase_trains_completions_only_and_measures_the_d6_lemma(tmp_path):
    r = _run("--out", tmp_path, "--steps", 4, "--every", 4, "--prompts", 2, "--heldout", 1,
             "--batch-size", 4, "--deep-pool", 12, "--deep-depth", 6, "--depth6-sources",
             "--completion-only", "--teacher-tokens", 320)
    assert r.returncode == 0, r.stderr[-2000:]
    line = next(l for l in r.stderr.splitlines() if l.startswith("corpus: 16 examples"))
    masked = int(line.split(" teacher examples trained on their completion only")[0].rsplit(", ", 1)[1])
    assert masked > 0, line   # 16 examples at teacher share 0.6
    rows = json.loads((tmp_path / "results.json").read_text())
    assert all(row["lemma d6->5"]["prompts"] == 2 and row["describe edit d6"]["prompts"] == 2 for row in rows)
    header = next(l for l in r.stdout.splitlines() if l.startswith("| step"))
    assert "lemma d6->5 | lift d4->5" in header
    meta = json.loads((tmp_path / "model" / "bootstrap.json").read_text())
    assert meta["continued"]["completion_only"] is True and meta["continued"]["deep_depth"] == 6


@pytest.mark.parametrize("flag, program_first", [((), False), (("--solution-first",), True)])
def test_solution_first_writes_the_teacher_pairs_program_first(tmp_path, flag, program_first):
    r = _run("--out", tmp_path, "--steps", 8, "--every", 8, "--prompts", 1, "--heldout", 1,
             "--batch-size", 4, *flag)
    assert r.returncode == 0, r.stderr[-2000:]
    line = next(l for l in r.stderr.splitlines() if l.startswith("corpus: 32 examples"))
    count = int(line.split("teacher pairs written program first")[0].rsplit(", ", 1)[1])
    # 32 examples at teacher share 0.6 hold teacher pairs: program first only with the flag
    assert (count > 0) == program_first, line
    meta = json.loads((tmp_path / "model" / "bootstrap.json").read_text())
    assert meta["continued"]["solution_first"] is program_first


def test_edit_share_writes_edit_descriptions_and_measures_them(tmp_path):
    r = _run("--out", tmp_path, "--steps", 8, "--every", 8, "--prompts", 2, "--heldout", 1,
             "--batch-size", 4, "--edit-share", 1)
    assert r.returncode == 0, r.stderr[-2000:]
    line = next(l for l in r.stderr.splitlines() if l.startswith("corpus: 32 examples"))
    first = int(line.split(" teacher pairs written program first")[0].rsplit(", ", 1)[1])
    edits = int(line.split(" of them a statement deletion")[0].rsplit(", ", 1)[1])
    # every teacher example describes an edit of its source, so each is program first and a deletion
    assert first == edits > 0, line
    rows = json.loads((tmp_path / "results.json").read_text())
    assert all(row["describe edit d4"]["prompts"] == 2 for row in rows)
    meta = json.loads((tmp_path / "model" / "bootstrap.json").read_text())
    assert meta["continued"]["edit_share"] == 1


@pytest.mark.parametrize("args, words", [
    (("--edit-share", "1.5"), "--edit-share must be in [0, 1]"),
    (("--start", "NOPE"), "is not a toy checkpoint folder"),
    (("--teacher-share", "0.95", "--guide-share", "0.1"), "must leave a share >= 0"),
    (("--steps", "0"), "must be >= 1"),
    (("--deep-pool", "-1"), "--deep-pool must be >= 0"),
    (("--depth5-sources",), "--depth5-sources / --depth6-sources need --deep-pool N"),
    (("--deep-pool", "4", "--depth6-sources"), "--depth6-sources needs --deep-depth 6"),
    (("--deep-depth", "6"), "--deep-depth needs --deep-pool N"),
    (("--deep-pool", "4", "--deep-depth", "7"), "invalid choice"),
])
def test_bad_input_is_one_clear_error(tmp_path, args, words):
    r = _run("--out", tmp_path / "o", *args)
    assert r.returncode != 0 and words in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_a_checkpoint_continued_twice_keeps_both_continuations_with_corpus_and_versions(tmp_path):
    import platform

    import torch
    import transformers

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    common = ("--steps", 2, "--every", 2, "--prompts", 1, "--heldout", 1, "--batch-size", 4)
    first, second = tmp_path / "first", tmp_path / "second"
    assert _run("--out", first, "--seed", 3, *common).returncode == 0
    r = _run("--start", first / "model", "--out", second, "--seed", 4, *common)
    assert r.returncode == 0, r.stderr[-2000:]
    meta = json.loads((second / "model" / "bootstrap.json").read_text())
    assert [c["from"] for c in meta["lineage"]] == [str(Path(ASSET_DIR)), str(first / "model")]
    assert [c["seed"] for c in meta["lineage"]] == [3, 4] and meta["continued"] == meta["lineage"][-1]
    a, b = (c["corpus_sha256"] for c in meta["lineage"])
    assert a != b and len(a) == len(b) == 16   # two corpus seeds, two corpora
    assert meta["continued"]["versions"] == {
        "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu": f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()}"}
