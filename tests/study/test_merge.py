"""`selfplay study --merge`: studies of one checkpoint, budget, final evaluation and goalpost set
become one report (each arm's evaluations from the folder that ran it; the floor's samplings
from the folder that sampled it); any difference in those settings, an arm in two folders or an
--out holding a study of its own is one clear error, before anything is written. Expected
values from the synthetic counts, by hand."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from selfplay_cli import study
from selfplay_cli._common import CLIError
from selfplay_study import runner
from selfplay_study.merge import MergeError, merge_into
from selfplay_study.protocol import Arm, FinalEval, Protocol, saved_protocol

BASE = Arm(name="base", label="start")
RLVR = Arm(name="rlvr", label="RLVR", config="x.yaml")
GASP = Arm(name="gasp", label="GASP", config="y.yaml")
FINAL = FinalEval(goalpost_k=4, heldout_n=4, ks=(1, 4), floor_samplings=2)


def _eval(hits: int, heldout_c: list[int], total_gp: int = 4) -> dict:
    return {"goalposts": {f"g{i}": [4, 1 if i < hits else 0] for i in range(total_gp)},
            "heldout": {f"h{i}": [4, c] for i, c in enumerate(heldout_c)},
            "depth": {f"h{i}": 1 for i in range(len(heldout_c))}}


def _study(folder: Path, arms, seeds=(0, 1), final=FINAL, common=("world.deep_pool=240",),
           hits: dict | None = None, goalposts=("g0", "g1", "g2", "g3")) -> Path:
    proto = Protocol(arms=tuple(arms), seeds=seeds, iterations=3, final=final, common=common)
    (folder / "evals").mkdir(parents=True)
    (folder / "protocol.json").write_text(json.dumps({"key": proto.key(),
                                                      "protocol": proto.model_dump(mode="json")}))
    (folder / "goalposts.json").write_text(json.dumps(list(goalposts)))
    for a in arms:
        for s in (range(final.floor_samplings) if not a.trains else seeds):
            h = (hits or {}).get(a.name, [1] * 10)[s]
            (folder / "evals" / f"{a.name}-s{s}.json").write_text(json.dumps(
                {"arm": a.name, "seed": s, "wall_s": 60.0 * (s + 1), "eval": _eval(h, [4, 0, 0, 0])}))
    return folder


def test_two_studies_become_one_report(tmp_path):
    a = _study(tmp_path / "a", [BASE, RLVR], hits={"base": [1, 3], "rlvr": [2, 2]})
    b = _study(tmp_path / "b", [GASP], seeds=(0, 1, 2), final=FINAL.model_copy(update={"floor_samplings": 3}),
               hits={"gasp": [4, 2, 3]})
    # a stray file of another arm whose name starts like one merged must not be taken along
    (b / "evals" / "gasp-sgs-s0.json").write_text("{}")
    proto = merge_into([a, b], tmp_path / "m", ["base", "gasp", "rlvr"])
    assert [x.name for x in proto.arms] == ["base", "gasp", "rlvr"]
    assert proto.seeds == (0, 1, 2) and proto.final.floor_samplings == 2   # the floor is a's
    assert sorted(p.name for p in (tmp_path / "m" / "evals").iterdir()) == [
        "base-s0.json", "base-s1.json", "gasp-s0.json", "gasp-s1.json", "gasp-s2.json",
        "rlvr-s0.json", "rlvr-s1.json"]
    saved = json.loads((tmp_path / "m" / "protocol.json").read_text())
    assert saved["merged_from"] == [str(a), str(b)] and saved["key"] == proto.key()
    rows = runner.write_report(proto, tmp_path / "m", runner.load_results(proto, tmp_path / "m"))["rows"]
    by = {r["arm"]: r for r in rows}
    assert by["base"]["n"] == 2 and by["base"]["goalposts/hits"][0] == 2.0      # (1 + 3) / 2
    assert by["gasp"]["n"] == 3 and by["gasp"]["goalposts/hits"][0] == 3.0      # (4 + 2 + 3) / 3
    assert by["rlvr"]["goalposts/hits"] == (2.0, 0.0)
    # a second merge into the same folder replaces the first
    merge_into([a, b], tmp_path / "m", ["rlvr", "gasp"])
    assert sorted(p.name for p in (tmp_path / "m" / "evals").iterdir())[0] == "gasp-s0.json"


@pytest.mark.parametrize("change, match", [
    ({"common": ("world.deep_pool=120",)}, "differ in common"),
    ({"final": FINAL.model_copy(update={"goalpost_k": 8})}, "differ in final evaluation"),
    ({"goalposts": ("g0", "g1", "g2", "g9")}, r"differ in goalpost set"),
])
def test_studies_of_other_settings_are_refused(tmp_path, change, match):
    a = _study(tmp_path / "a", [BASE, RLVR])
    b = _study(tmp_path / "b", [GASP], **change)
    with pytest.raises(MergeError, match=match):
        merge_into([a, b], tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_an_arm_in_two_folders_an_unknown_arm_and_a_study_as_out_are_refused(tmp_path):
    a = _study(tmp_path / "a", [BASE, RLVR])
    b = _study(tmp_path / "b", [RLVR, GASP])
    with pytest.raises(MergeError, match="'rlvr' is in both"):
        merge_into([a, b], tmp_path / "m")
    c = _study(tmp_path / "c", [GASP])
    with pytest.raises(MergeError, match=r"--arms \['azr'\] not in the merged folders"):
        merge_into([a, c], tmp_path / "m", ["base", "azr"])
    with pytest.raises(MergeError, match="holds a study of its own"):
        merge_into([a, c], b)
    with pytest.raises(MergeError, match="not a study folder"):
        merge_into([a, tmp_path / "nothing"], tmp_path / "m")
    assert not (tmp_path / "m").exists()
    assert sorted(p.name for p in (b / "evals").iterdir()) == ["gasp-s0.json", "gasp-s1.json",
                                                              "rlvr-s0.json", "rlvr-s1.json"]


def _args(*argv: str):
    ap = argparse.ArgumentParser()
    study.register(ap.add_subparsers())
    return ap.parse_args(["study", *argv])


def test_the_cli_merges_and_refuses_settings_flags(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    a = _study(tmp_path / "a", [BASE, RLVR])
    b = _study(tmp_path / "b", [GASP])
    with pytest.raises(CLIError, match="drop --seeds, --set"):
        study.run(_args("--merge", str(a), str(b), "--out", str(tmp_path / "m"), "--seeds", "0",
                        "--set", "x=1"))
    assert study.run(_args("--merge", str(a), str(b), "--out", str(tmp_path / "m"))) == 0
    out = capsys.readouterr().out
    assert "| GASP | 2 |" in out and "| RLVR | 2 |" in out
    assert (tmp_path / "m" / "study.png").is_file() and (tmp_path / "m" / "mlruns").is_dir()
    with pytest.raises(CLIError, match="not a study folder"):
        study.run(_args("--merge", str(a), str(tmp_path / "none"), "--out", str(tmp_path / "m2")))


def test_report_only_reports_the_saved_protocol_not_the_flags_defaults(tmp_path, capsys, monkeypatch):
    """A study run at another budget than the registry's and reported with no flags came out
    under the default protocol (12 iterations, every registered arm, its seeds): the saved
    protocol is the one reported, and a flag that contradicts it is one clear error."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    a = _study(tmp_path / "a", [BASE, RLVR], hits={"rlvr": [2, 4]})
    saved = saved_protocol(a)
    assert study.run(_args("--report-only", "--out", str(a))) == 0
    out = capsys.readouterr().out
    assert f"Protocol `{saved.key()}`" in out and "3 iterations each" in out
    assert "| RLVR | 2 | 3.0 ± 1.4 |" in out          # hits 2 and 4: mean 3, sd sqrt(2)
    assert "AZR" not in out and "GASP" not in out      # only the arms the folder ran
    # repeating the saved settings is fine; asking for others is refused before anything is written
    assert study.run(_args("--report-only", "--out", str(a), "--iterations", "3", "--seeds", "0,1")) == 0
    capsys.readouterr()
    before = (a / "study.md").read_text()
    with pytest.raises(CLIError, match=r"fixed iterations = 3 before its runs, and --iterations asks for 12"):
        study.run(_args("--report-only", "--out", str(a), "--iterations", "12"))
    with pytest.raises(CLIError, match=r"fixed seeds = \(0, 1\).*--seeds asks for \(0, 1, 2\)"):
        study.run(_args("--report-only", "--out", str(a), "--seeds", "0,1,2"))
    with pytest.raises(CLIError, match="--new would discard them"):
        study.run(_args("--report-only", "--new", "--out", str(a)))
    assert (a / "study.md").read_text() == before
    assert study.run(_args("--report-only", "--out", str(a), "--arms", "rlvr")) == 0
    assert "| RLVR | 2 |" in capsys.readouterr().out
    with pytest.raises(CLIError, match="not a study folder"):
        study.run(_args("--report-only", "--out", str(tmp_path / "none")))
