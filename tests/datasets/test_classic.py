"""HumanEval and MBPP (sanitized): tests read from their asserts, canonical solutions pass."""

import ast
import collections

import pytest

from selfplay_core.datasets.asserts import AssertCase, Unsupported, case_from_assert, name_is
from selfplay_core.datasets.classic import load_humaneval, load_mbpp
from selfplay_core.problems import InputError, Sample


def case(src, fn="f"):
    return case_from_assert(ast.parse(src).body[0], name_is(fn))


@pytest.mark.parametrize("src,expected", [
    ("assert f(1, [2]) == (3, 'a')", AssertCase([1, [2]], (3, "a"))),
    ("assert (3, 'a') == f(1, [2])", AssertCase([1, [2]], (3, "a"))),
    ("assert f(-1) is None", AssertCase([-1], None)),
    ("assert f('x')", AssertCase(["x"], True, "truthy")),
    ("assert not f('x')", AssertCase(["x"], False, "truthy")),
    ("assert abs(f(1.33) - 0.33) < 1e-6", AssertCase([1.33], 0.33, "eq", 1e-6)),
    ("assert math.fabs(0.5 - f(2)) <= 0.01", AssertCase([2], 0.5, "eq", 0.01)),
    ("assert math.isclose(f(10), 200.0, rel_tol=0.001)", AssertCase([10], 200.0, "eq", 0.2)),
    ("assert set(f((1, 2), (2, 3))) == set((2,))", AssertCase([(1, 2), (2, 3)], (2,), "set_eq")),
    ("assert f(3 * 19, 'ab' + 'c', [1, 0 ** 0]) == 2.0 / 4", AssertCase([57, "abc", [1, 1]], 0.5)),
    ("assert f({1: 'a'}, {2, 3}) == {'k': [1]}", AssertCase([{1: "a"}, {2, 3}], {"k": [1]})),
])
def test_assert_shapes(src, expected):
    assert case(src) == expected


def test_assert_true_is_a_no_op():
    assert case("assert True, 'message'") is None


@pytest.mark.parametrize("src,reason", [
    ("assert f(x) == 1", "argument is not a literal"),
    ("assert f(1) == g(1)", "expected value is not a literal"),
    ("assert f(1, key=2) == 1", "keyword arguments"),
    ("assert f(1) > 3", "unsupported assert"),
    ("assert f(2) ** 10 ** 10 == 1", "unsupported assert"),
    ("assert f('a' * 10**9) == 1", "argument is not a literal"),
    ("assert tuple(f([1])) == tuple([1])", "unsupported assert"),
])
def test_unreadable_asserts_raise(src, reason):
    with pytest.raises(Unsupported, match=reason):
        case(src)


@pytest.fixture(scope="module")
def humaneval(executor):
    return load_humaneval(executor=executor)


@pytest.fixture(scope="module")
def mbpp(executor):
    return load_mbpp(executor=executor)


def test_humaneval_loads_every_task(humaneval):
    b = humaneval
    assert len(b.problems) == 164 and b.skipped == []
    assert b.version.startswith("openai/human-eval") and len(b.content_hash) == 64
    src = collections.Counter(p.metadata["source_tests"] for p in b.problems)
    assert src == {"asserts": 156, "recorded": 8}
    p0 = b.by_id()["HumanEval/0"]
    assert p0.tests[0].args == [[1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3] and p0.tests[0].expected is True
    # HumanEval/53 adds 100 random pairs; recorded with a fixed seed, so the same every time.
    p53 = b.by_id()["HumanEval/53"]
    assert len(p53.tests) == 105 and all(t.expected == sum(t.args) for t in p53.tests)
    p32 = b.by_id()["HumanEval/32"]
    assert (p32.oracle, p32.atol, len(p32.tests)) == ("poly_root", 1e-4, 100)
    # abs(candidate(x) - y) < 1e-6 becomes a tolerance
    assert b.by_id()["HumanEval/2"].atol == 1e-6


def test_mbpp_loads_all_but_one_task_and_says_why(mbpp):
    b = mbpp
    assert len(b.problems) == 426
    assert b.skipped_counts() == {"unsupported assert": 1}
    assert "sys.getsizeof" in b.skipped[0].detail  # a runtime-dependent expected value
    ids = b.by_id()
    assert ids["Mbpp/2"].oracle == "set_eq" and ids["Mbpp/2"].entry_point == "similar_elements"
    assert ids["Mbpp/2"].tests[0].args == [(3, 4, 5, 6), (5, 7, 4, 10)]
    assert ids["Mbpp/82"].atol == pytest.approx(0.001 * 4188.790204786391)  # the strictest isclose
    assert ids["Mbpp/2"].prompt.startswith('"""\nWrite a function to find the shared elements')


def test_canonical_solutions_pass_every_extracted_test(humaneval, mbpp, executor):
    for b in (humaneval, mbpp):
        verdicts = executor.verify([(p, Sample(p.id, "ref", b.references[p.id])) for p in b.problems],
                                   early_exit=False)
        assert [(v.problem_id, v.verdict.value, v.detail) for v in verdicts if not v.passed] == []


def test_wrong_solutions_fail(humaneval, executor):
    b = humaneval
    items = [(p, Sample(p.id, "neg", f"def {p.entry_point}(*args):\n    return 'nope'\n"))
             for p in b.problems]
    assert not any(v.passed for v in executor.verify(items))


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(InputError, match="nope.json: file not found"):
        load_mbpp(tmp_path / "nope.json")
    bad = tmp_path / "m.json"
    bad.write_text('[{"task_id": 2, "prompt": "p", "code": "def f(x): return x", "test_list": []}]')
    with pytest.raises(InputError, match=r"record 0 \(Mbpp/2\): field 'test_list' must be a non-empty list"):
        load_mbpp(bad)
    bad.write_text('{"task_id": 2}')
    with pytest.raises(InputError, match="expected a JSON array"):
        load_mbpp(bad)
    with pytest.raises(InputError, match="HumanEval.jsonl.gz: file not found"):
        load_humaneval(tmp_path / "HumanEval.jsonl.gz")
