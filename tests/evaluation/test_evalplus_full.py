"""Acceptance on the full HumanEval+ / MBPP+ sets through the CLI (minutes: marked slow).

Canonical solutions as samples must score 100 %; adding a known-wrong sample to every third
problem must give exactly the hand-computed pass@1."""

import json

import pytest

from selfplay_cli.main import main
from selfplay_core.datasets.registry import load_benchmark
from selfplay_core.problems import write_jsonl

pytestmark = pytest.mark.slow


def _wrong(p, code):
    # The canonical answer wrapped in a tuple: wrong under the default comparison.
    return code + f"\n_orig = {p.entry_point}\ndef {p.entry_point}(*a):\n    return ('wrong', _orig(*a))\n"


@pytest.mark.parametrize("name,n_problems", [("humanevalplus", 164), ("mbppplus", 378)])
def test_canonical_scores_100_and_known_wrong_mix_scores_hand_value(name, n_problems, tmp_path, capsys, executor):
    bench = load_benchmark(name, executor=executor)
    assert len(bench.problems) == n_problems
    right = [{"problem_id": p.id, "sample_id": "canonical", "code": bench.references[p.id]}
             for p in bench.problems]
    write_jsonl(tmp_path / "right.jsonl", right)
    assert main(["evaluate", "--benchmark", name, "--samples", str(tmp_path / "right.jsonl"),
                 "--out", str(tmp_path / "a"), "--workers", "2"]) == 0, capsys.readouterr().err
    rep = json.loads((tmp_path / "a" / "report.json").read_text())
    assert rep["metrics"] == {"pass@1": 1.0}, [
        r for r in map(json.loads, (tmp_path / "a" / "results.jsonl").open()) if r["c"] == 0]
    assert rep["dataset"]["version"].startswith("HumanEval+ v0.1.10" if name == "humanevalplus" else "MBPP+ v0.2.0")

    wrong_for = [p for i, p in enumerate(bench.problems) if i % 3 == 0 and p.oracle == "default"]
    wrong = [{"problem_id": p.id, "sample_id": "wrong", "code": _wrong(p, bench.references[p.id])}
             for p in wrong_for]
    write_jsonl(tmp_path / "mix.jsonl", right + wrong)
    assert main(["evaluate", "--benchmark", name, "--samples", str(tmp_path / "mix.jsonl"),
                 "--out", str(tmp_path / "b"), "--workers", "2"]) == 0, capsys.readouterr().err
    rep = json.loads((tmp_path / "b" / "report.json").read_text())
    # problems with a wrong sample: n = 2, c = 1 -> 0.5; the rest 1.0
    expected = (n_problems - 0.5 * len(wrong_for)) / n_problems
    assert rep["metrics"]["pass@1"] == pytest.approx(expected)
    assert rep["counts"]["verdicts"]["passed"] == n_problems
