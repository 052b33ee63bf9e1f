"""`selfplay evaluate` end to end: samples files in, report/CSV/JSONL out, clear errors."""

import csv
import json

import pytest

from selfplay_cli.main import main
from selfplay_core.datasets.registry import load_benchmark
from selfplay_core.problems import write_jsonl

# Hand-written solutions for a few real LCB v5 problems (2024-08), used as samples.
LCB_SOLUTIONS = {
    "abc365_a": "y = int(input())\nprint(366 if (y % 4 == 0 and y % 100 != 0) or y % 400 == 0 else 365)\n",
    "abc365_b": "n = int(input())\na = list(map(int, input().split()))\norder = sorted(range(n), key=lambda i: a[i])\nprint(order[-2] + 1)\n",
    "3543": ("class Solution:\n    def countKConstraintSubstrings(self, s: str, k: int) -> int:\n"
             "        total = 0\n        for i in range(len(s)):\n            z = o = 0\n"
             "            for j in range(i, len(s)):\n                z += s[j] == '0'\n                o += s[j] == '1'\n"
             "                if z <= k or o <= k:\n                    total += 1\n        return total\n"),
    # `List` comes from the LCB import preamble, as in LiveCodeBench's own harness.
    "3555": ("class Solution:\n    def getFinalState(self, nums: List[int], k: int, multiplier: int) -> List[int]:\n"
             "        for _ in range(k):\n            i = nums.index(min(nums))\n            nums[i] *= multiplier\n"
             "        return nums\n"),
    "3553": ("class Solution:\n    def checkTwoChessboards(self, coordinate1: str, coordinate2: str) -> bool:\n"
             "        c = lambda s: (ord(s[0]) + int(s[1])) % 2\n        return c(coordinate1) == c(coordinate2)\n"),
}
LCB_WRONG = {
    "abc365_a": "print(365)\n",
    "abc365_b": "input()\nprint(1)\n",
    "3543": "class Solution:\n    def countKConstraintSubstrings(self, s, k):\n        return len(s)\n",
    "3555": "class Solution:\n    def getFinalState(self, nums, k, multiplier):\n        return nums\n",
    "3553": "class Solution:\n    def checkTwoChessboards(self, a, b):\n        return True\n",
}


def _run(capsys, *argv):
    code = main(["evaluate", *argv, "--workers", "2"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_lcb_samples_end_to_end(tmp_path, capsys):
    samples = [{"problem_id": pid, "sample_id": "a", "code": c} for pid, c in LCB_SOLUTIONS.items()]
    samples += [{"problem_id": pid, "sample_id": "b", "code": c} for pid, c in LCB_WRONG.items()]
    write_jsonl(tmp_path / "s.jsonl", samples)
    out = tmp_path / "out"
    code, stdout, err = _run(capsys, "--benchmark", "lcb", "--samples", str(tmp_path / "s.jsonl"),
                             "--ids", ",".join(LCB_SOLUTIONS), "--k", "1,2", "--out", str(out))
    assert code == 0, err
    rep = json.loads((out / "report.json").read_text())
    # 3553's wrong answer (always True) passes the first public test but not the second.
    assert rep["metrics"] == {"pass@1": 0.5, "pass@2": 1.0}
    assert rep["dataset"]["filters"]["window"] == "test" and rep["dataset"]["n_problems"] == 5
    assert rep["breakdown"]["platform"] == {"atcoder": {"n_problems": 2, "pass@1": 0.5, "pass@2": 1.0},
                                            "leetcode": {"n_problems": 3, "pass@1": 0.5, "pass@2": 1.0}}
    assert any("public tests only" in w for w in rep["dataset"]["notes"])
    assert "public tests only" in stdout
    assert "pass@1" in stdout and "50.00%" in stdout and "lcb" in stdout
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert {r["problem_id"] for r in rows} == set(LCB_SOLUTIONS)
    assert all(r["content_hash"] == rep["dataset"]["content_hash"] for r in rows)
    assert {r["platform"] for r in rows} == {"atcoder", "leetcode"}
    summary = list(csv.DictReader((out / "summary.csv").open()))
    assert {"group": "all", "value": "all", "n_problems": "5", "metric": "pass@1", "score": "0.5"} in summary
    # samples.jsonl re-scores to the same numbers
    out2 = tmp_path / "out2"
    code, _, err = _run(capsys, "--benchmark", "lcb", "--samples", str(out / "samples.jsonl"),
                        "--ids", ",".join(LCB_SOLUTIONS), "--k", "1,2", "--out", str(out2))
    assert code == 0, err
    assert json.loads((out2 / "report.json").read_text())["metrics"] == rep["metrics"]


def test_mbppplus_subset_canonical_and_known_wrong(tmp_path, capsys, executor):
    ids = ["Mbpp/2", "Mbpp/3", "Mbpp/4", "Mbpp/6", "Mbpp/7", "Mbpp/8", "Mbpp/9", "Mbpp/11"]
    bench = load_benchmark("mbppplus", ids=ids, executor=executor)
    right = [{"problem_id": p.id, "sample_id": "canonical", "code": bench.references[p.id]}
             for p in bench.problems]
    write_jsonl(tmp_path / "right.jsonl", right)
    code, stdout, err = _run(capsys, "--benchmark", "mbppplus", "--samples", str(tmp_path / "right.jsonl"),
                             "--ids", ",".join(ids), "--out", str(tmp_path / "a"))
    assert code == 0, err
    rep = json.loads((tmp_path / "a" / "report.json").read_text())
    assert rep["metrics"] == {"pass@1": 1.0}
    assert rep["dataset"]["version"] == "MBPP+ v0.2.0" and rep["counts"]["verdicts"] == {"passed": 8}
    # Two known-wrong samples for half of the problems: the returned value is off.
    wrong = [{"problem_id": p.id, "sample_id": f"w{j}", "code": bench.references[p.id] +
              f"\n_orig = {p.entry_point}\ndef {p.entry_point}(*a):\n    return ('wrong', _orig(*a))\n"}
             for p in bench.problems[:4] for j in range(2)]
    write_jsonl(tmp_path / "mix.jsonl", right + wrong)
    code, _, err = _run(capsys, "--benchmark", "mbppplus", "--samples", str(tmp_path / "mix.jsonl"),
                        "--ids", ",".join(ids), "--missing", "error", "--out", str(tmp_path / "b"))
    assert code == 0, err
    rep = json.loads((tmp_path / "b" / "report.json").read_text())
    # 4 problems with 1/3 correct, 4 with 1/1: pass@1 = (4 * 1/3 + 4) / 8 = 2/3
    assert rep["metrics"]["pass@1"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("extra,message", [
    (["--k", "1,5"], "pass@5 needs at least 5 samples per problem"),
    (["--window", "train"], "--window apply to --benchmark lcb only"),
    (["--k", "x"], "--k: k must be a comma-separated list of integers"),
    (["--ids", "HumanEval/0,HumanEval/9999"], "unknown problem id(s): HumanEval/9999"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, extra, message):
    write_jsonl(tmp_path / "s.jsonl", [{"problem_id": "HumanEval/0", "sample_id": 1, "code": "x"}])
    code, _, err = _run(capsys, "--benchmark", "humaneval", "--samples", str(tmp_path / "s.jsonl"),
                        "--ids", "HumanEval/0", "--out", str(tmp_path / "o"), *extra)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_missing_samples_file(tmp_path, capsys):
    code, _, err = _run(capsys, "--benchmark", "humaneval", "--samples", str(tmp_path / "none.jsonl"),
                        "--out", str(tmp_path / "o"))
    assert code == 2 and "none.jsonl: file not found" in err


def test_model_end_to_end_with_the_hf_engine(tmp_path, capsys, micro_model_dir):
    # A real (tiny, toy-world) checkpoint through the real engine: the mechanics are under test
    # (prompts, sampling settings, greedy, extraction, verification, report), not the score.
    out = tmp_path / "o"
    code, stdout, err = _run(capsys, "--benchmark", "humaneval", "--model", str(micro_model_dir),
                             "--ids", "HumanEval/0,HumanEval/2", "--n", "2", "--k", "1,2", "--greedy",
                             "--max-new-tokens", "24", "--seed", "5", "--out", str(out))
    assert code == 0, err
    rep = json.loads((out / "report.json").read_text())
    assert rep["source"] == {"kind": "engine", "model": str(micro_model_dir), "engine": "HFEngine"}
    s = rep["sampling"]
    assert (s["n"], s["max_new_tokens"], s["seed"], s["greedy"], s["template"]["name"]) == (2, 24, 5, True, "plain")
    assert rep["counts"]["samples"] == 6 and rep["timings"]["generate_s"] > 0
    assert set(rep["metrics"]) == {"pass@1", "pass@2", "greedy_pass@1"}
    lines = [json.loads(x) for x in (out / "samples.jsonl").open()]
    assert len(lines) == 6 and all("completion" in x and x["code"] for x in lines)
    assert {x["sample_id"] for x in lines} == {"s0", "s1", "greedy"}


def test_model_whose_context_is_too_small_is_refused_before_expected_outputs(tmp_path, capsys, monkeypatch):
    from selfplay_cli.main import main
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    monkeypatch.setenv("SELFPLAY_CACHE", str(tmp_path / "cache"))
    rc = main(["evaluate", "--benchmark", "humanevalplus", "--model", str(ASSET_DIR), "--out",
               str(tmp_path / "o"), "--ids", "HumanEval/0,HumanEval/1"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("selfplay evaluate: error: humanevalplus: 2 of 2 prompts do not fit checkpoint")
    assert "max_new_tokens 1024 > its context of 512 tokens" in err and "Traceback" not in err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "o").exists()


def test_unknown_sample_ids_are_refused_before_expected_outputs(tmp_path, capsys, monkeypatch):
    from selfplay_cli.main import main

    monkeypatch.setenv("SELFPLAY_CACHE", str(tmp_path / "cache"))
    s = tmp_path / "s.jsonl"
    s.write_text('{"problem_id": "HumanEval/0", "sample_id": "0", "code": "pass"}\n'
                 '{"problem_id": "HumanEval/999", "sample_id": "0", "code": "pass"}\n')
    rc = main(["evaluate", "--benchmark", "humanevalplus", "--samples", str(s), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "sample #2 (sample_id '0'): field 'problem_id': unknown problem 'HumanEval/999'" in err
    assert not (tmp_path / "cache").exists()
