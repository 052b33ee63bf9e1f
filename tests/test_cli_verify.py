"""`selfplay verify`: the batch contract, exit codes and one-line errors, run as a user would."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def selfplay(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "selfplay_cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_bundled_example_verdicts(tmp_path):
    out = tmp_path / "v.jsonl"
    r = selfplay("verify", "--problems", "examples/problems.jsonl", "--samples",
                 "examples/samples.jsonl", "--out", str(out), "--workers", "2")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    got = {(v["problem_id"], v["sample_id"]): v["verdict"] for v in rows}
    assert got == {
        ("add", "ok"): "passed", ("add", "off-by-one"): "wrong_answer",
        ("add", "eq-hack"): "wrong_answer", ("add", "exit-hack"): "runtime_error",
        ("pairs", "ok"): "passed", ("pairs", "lists-not-tuples"): "wrong_answer",
        ("mean", "ok"): "passed", ("mean", "int-division"): "wrong_answer",
        ("sum-lines", "ok"): "passed", ("sum-lines", "syntax-error"): "compile_error",
        ("sum-lines", "infinite-loop"): "timeout",
    }
    for v in rows:
        assert set(v) >= {"problem_id", "sample_id", "verdict", "tests", "time_s"}
        assert all(set(t) >= {"verdict", "time_s"} for t in v["tests"])
    assert "passed" in r.stdout and "isolation=bwrap" in r.stdout


def test_all_tests_flag_records_every_test(tmp_path):
    p = write(tmp_path / "p.jsonl", [{"id": "x", "kind": "call", "entry_point": "f",
                                       "tests": [{"args": [i], "expected": i} for i in range(5)]}])
    s = write(tmp_path / "s.jsonl", [{"problem_id": "x", "sample_id": 1,
                                       "code": "def f(x):\n    return 0\n"}])
    out = tmp_path / "v.jsonl"
    assert selfplay("verify", "--problems", p, "--samples", s, "--out", str(out)).returncode == 0
    assert [t["verdict"] for t in json.loads(out.read_text())["tests"]] == ["passed", "wrong_answer"]
    assert selfplay("verify", "--problems", p, "--samples", s, "--out", str(out),
                    "--all-tests").returncode == 0
    tests = json.loads(out.read_text())["tests"]
    assert [t["verdict"] for t in tests] == ["passed"] + ["wrong_answer"] * 4


GOOD_PROBLEM = {"id": "x", "kind": "call", "entry_point": "f", "tests": [{"args": [1], "expected": 1}]}
GOOD_SAMPLE = {"problem_id": "x", "sample_id": 0, "code": "def f(x):\n    return x\n"}

BAD_INPUTS = [
    # problems rows, samples rows, expected message fragments
    (["{not json"], [GOOD_SAMPLE], ["p.jsonl:1", "not valid JSON"]),
    ([{**GOOD_PROBLEM, "kind": "python"}], [GOOD_SAMPLE], ["p.jsonl:1", "'kind'"]),
    ([{k: v for k, v in GOOD_PROBLEM.items() if k != "tests"}], [GOOD_SAMPLE], ["p.jsonl:1", "'tests'"]),
    ([{**GOOD_PROBLEM, "entry_point": None}], [GOOD_SAMPLE], ["p.jsonl:1", "'entry_point'"]),
    ([{**GOOD_PROBLEM, "tests": [{"stdin": "1"}]}], [GOOD_SAMPLE], ["p.jsonl:1", "'tests[0].args'"]),
    ([{**GOOD_PROBLEM, "time_limit_s": "fast"}], [GOOD_SAMPLE], ["p.jsonl:1", "'time_limit_s'"]),
    ([GOOD_PROBLEM, GOOD_PROBLEM], [GOOD_SAMPLE], ["p.jsonl:2", "duplicate"]),
    ([GOOD_PROBLEM], [{"problem_id": "x", "sample_id": 0}], ["s.jsonl:1", "'code'"]),
    ([GOOD_PROBLEM], [{**GOOD_SAMPLE, "problem_id": "nope"}], ["s.jsonl", "'problem_id'", "nope"]),
    ([GOOD_PROBLEM], ["[1, 2]"], ["s.jsonl:1", "JSON object"]),
]


@pytest.mark.parametrize("problems,samples,fragments", BAD_INPUTS)
def test_malformed_input_is_one_clear_line_and_exit_2(tmp_path, problems, samples, fragments):
    p = write(tmp_path / "p.jsonl", problems)
    s = write(tmp_path / "s.jsonl", samples)
    out = tmp_path / "v.jsonl"
    r = selfplay("verify", "--problems", p, "--samples", s, "--out", str(out))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    for frag in fragments:
        assert frag in lines[0]
    assert not out.exists()  # nothing half-written


def test_missing_file_is_a_clear_error(tmp_path):
    r = selfplay("verify", "--problems", str(tmp_path / "none.jsonl"), "--samples", "x", "--out", "y")
    assert r.returncode == 2 and "file not found" in r.stderr


def test_help_lists_commands():
    r = selfplay("--help")
    assert r.returncode == 0 and "verify" in r.stdout and "convert" in r.stdout
