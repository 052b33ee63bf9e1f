"""lab/study_goalpost_reeval.py: which ids a goalpost file names, its table (values worked
out by hand), one clear error for a folder that is no study, and a real re-evaluation of a study
folder whose rows point at the committed checkpoint."""

import json
import re
import sys

import pytest

from lab.tests.run_script import LAB, run_lab_script

sys.path.insert(0, str(LAB))
import study_goalpost_reeval as R  # noqa: E402


def test_goalpost_ids_from_a_list_or_a_mining_record():
    assert R.goalpost_ids(["a", "b", "a"], reserve=False) == ["a", "b"]
    rec = {"ids": ["a", "b"], "reserve": ["c", "a"]}
    assert R.goalpost_ids(rec, reserve=False) == ["a", "b"]
    assert R.goalpost_ids(rec, reserve=True) == ["a", "b", "c"]
    with pytest.raises(R.ReevalError, match="--reserve needs a mining record"):
        R.goalpost_ids(["a"], reserve=True)
    with pytest.raises(R.ReevalError, match="list of ids or a mining record"):
        R.goalpost_ids({"goalposts": 3}, reserve=False)


def row(hits, passes, n=10):
    return {"hits": hits, "pass_rate": passes / n, "hit_ids": [f"g{i}" for i in range(hits)]}


def test_the_table_reads_hits_as_the_study_does():
    results = {"base": [row(1, 1), row(1, 2), row(2, 2)],      # hits 1.33 ± 0.58
               "rlvr": [row(1, 1), row(2, 2), row(1, 1)],      # 1.33 ± 0.58
               "gasp-edit": [row(4, 5), row(5, 6), row(4, 4)]}  # 4.33 ± 0.58; s.e. 0.47: +3.0 > 0.94
    lines = R.table(results, 33, ["base", "rlvr"]).splitlines()
    assert lines[0] == "| arm | runs | hits@k (of 33) | pass rate | hit by any | vs base | vs rlvr |"
    assert lines[2] == "| base | 3 | 1.3 ± 0.6 | 0.1667 ± 0.0577 | 2/33 | - | not separated |"
    assert lines[4] == "| gasp-edit | 3 | 4.3 ± 0.6 | 0.5000 ± 0.1000 | 5/33 | above | above |"


def test_a_folder_without_a_study_is_one_clear_error(tmp_path):
    gp = tmp_path / "g.json"
    gp.write_text("[]")
    r = run_lab_script("study_goalpost_reeval.py", tmp_path, "--goalposts", gp, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip() == f"study_goalpost_reeval: {tmp_path / 'protocol.json'}: not found; pass the folder of a `selfplay study`"


def test_rows_with_the_same_checkpoint_and_seed_count_the_same(tmp_path):
    """Two arms whose rows are the committed checkpoint sampled with the same seeds: the
    re-evaluation must give both the same counts, and the file's ids in its order."""
    from selfplay_study.protocol import Arm, Protocol
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    protocol = Protocol(arms=(Arm(name="base", label="start"), Arm(name="rlvr", label="RLVR", config="rlvr-tiny-cpu.yaml")),
                        seeds=(0, 1), final={"floor_samplings": 2})
    (tmp_path / "protocol.json").write_text(json.dumps({"key": protocol.key(), "protocol": protocol.model_dump(mode="json")}))
    (tmp_path / "evals").mkdir()
    for arm in ("base", "rlvr"):
        for s in (0, 1):
            (tmp_path / "evals" / f"{arm}-s{s}.json").write_text(json.dumps(
                {"arm": arm, "seed": s, "checkpoint": str(ASSET_DIR), "eval": {"seed": 7 + s}}))
    (tmp_path / "runs" / "rlvr-s0").mkdir(parents=True)
    (tmp_path / "runs" / "rlvr-s0" / "config.yaml").write_text("model:\n  torch_threads: 1\n")
    ids = json.loads((ASSET_DIR / "goalposts.json").read_text())["ids"][:6]
    gp = tmp_path / "six.json"
    gp.write_text(json.dumps(ids))
    r = run_lab_script("study_goalpost_reeval.py", tmp_path, "--goalposts", gp, "--k", 3, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    saved = json.loads((tmp_path / "reeval-six.json").read_text())
    assert saved["ids"] == ids and saved["k"] == 3 and len(saved["rows"]) == 4
    for s in (0, 1):
        a, b = saved["rows"][f"base-s{s}"], saved["rows"][f"rlvr-s{s}"]
        assert a["counts"] == b["counts"] and list(a["counts"]) == ids
        assert all(n == 3 and 0 <= c <= 3 for n, c in a["counts"].values())
        assert a["hits"] == sum(c > 0 for _, c in a["counts"].values())
    assert re.search(r"^\| rlvr \| 2 \| .* \| - \|$", r.stdout, re.M), r.stdout
    # a second call samples nothing again: every row is saved
    again = run_lab_script("study_goalpost_reeval.py", tmp_path, "--goalposts", gp, "--k", 3, timeout=900)
    assert again.returncode == 0 and "[base-s0]" not in again.stdout
