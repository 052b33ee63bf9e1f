"""LiveCodeBench loading: the shared public-tests file, a generated official-schema fixture with
compressed private tests, filters, and clear errors."""

import base64
import collections
import json
import os
import pickle
import re
import zlib

import pytest
from lcb_fixture import SOLUTIONS, WRONG, official_rows, write_rows

from selfplay_core.datasets.livecodebench import (load_lcb, pack_private_tests, release_files,
                                                  unpack_private_tests)
from selfplay_core.problems import InputError, Sample, problem_from_json

SHARED_FILE_SHA = "0252b9192dbd5a061a54a797b470c5ecc66fb1115742b27bc885f3bc261c51f9"


# ------------------------------------------------------------------------------------------------
# The shared file (../shared/data/livecodebench): counts as its SOURCE.md states them
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shared():
    return load_lcb(window="all")


def test_shared_file_counts_match_source_md(shared):
    assert len(shared.problems) == 616
    assert shared.source_sha256 == SHARED_FILE_SHA
    assert "release_v5" in shared.version and shared.skipped == []
    splits = collections.Counter(p.metadata["split"] for p in shared.problems)
    assert splits == {"test_2024-08-01_to_2025-02-01": 192, "train_before_2024-08-01": 424}
    tests = collections.Counter(p.kind for p in shared.problems for _ in p.tests)
    assert tests == {"stdin": 943, "call": 661}
    # Every problem has public tests only, and the report says so.
    assert all(p.metadata["n_private"] == 0 for p in shared.problems)
    assert any("public tests only" in n for n in shared.notes)


def test_windows_split_by_date_and_platform():
    test = load_lcb(window="test")
    train = load_lcb(window="train")
    assert len(test.problems) == 192 and len(train.problems) == 424
    assert test.skipped == [] and train.skipped == []
    by = lambda b: collections.Counter(p.metadata["platform"] for p in b.problems)
    assert by(test) == {"atcoder": 117, "leetcode": 75}
    # In the training split only LeetCode is known (functional tests); AtCoder and Codeforces
    # cannot be told apart, so the platform is null there.
    assert by(train) == {"leetcode": 196, None: 228}
    assert all(p.kind == "call" for p in train.problems if p.metadata["platform"] == "leetcode")
    assert all("2024-08-01" <= p.metadata["contest_date"] < "2025-02-01" for p in test.problems)
    # The two windows partition the file; a filtered-out id is known (ignored, not unknown).
    assert {p.id for p in test.problems} | {p.id for p in train.problems} == {
        p.id for p in load_lcb(window="all").problems}
    assert test.excluded_ids == {p.id for p in train.problems}
    # Ids: question_id where known, else the uid.
    assert all(p.id == p.metadata["question_id"] for p in test.problems)
    assert all(p.id.startswith("lcbv5-train-") for p in train.problems if not p.metadata["question_id"])


def test_filters_never_guess_unknown_attributes():
    # Training rows have no exact date: a window cutting through 2023-05..2024-07 cannot place them.
    b = load_lcb(date_from="2024-01-01", date_to="2024-10-01")
    assert len(b.problems) == 81  # the Aug-Sep 2024 test-window problems
    assert b.skipped_counts() == {"date unknown: cannot apply the filter": 424}
    # "atcoder" alone cannot be decided for null-platform stdin rows ...
    b = load_lcb(window="all", platforms="atcoder")
    assert len(b.problems) == 117 and b.skipped_counts() == {"platform unknown: cannot apply the filter": 228}
    # ... but atcoder-or-codeforces can, and leetcode excludes them for certain.
    assert len(load_lcb(window="train", platforms=["atcoder", "codeforces"]).problems) == 228
    lc = load_lcb(window="all", platforms="leetcode")
    assert len(lc.problems) == 271 and lc.skipped == []
    hard = load_lcb(window="test", difficulties="hard")
    assert collections.Counter(p.metadata["platform"] for p in hard.problems) == {"atcoder": 61, "leetcode": 20}
    assert len(load_lcb(window="test", kinds="stdin").problems) == 117


def test_content_hash_identifies_the_selection():
    a, b = load_lcb(window="test"), load_lcb(window="test")
    assert a.content_hash == b.content_hash and len(a.content_hash) == 64
    assert load_lcb(window="train").content_hash != a.content_hash
    assert load_lcb(window="test", time_limit_s=3.0).content_hash == a.content_hash  # limits are settings


def test_every_functional_public_test_round_trips_through_the_executor(shared, executor):
    functional = [p for p in shared.problems if p.kind == "call"]
    assert len(functional) == 271 and sum(len(p.tests) for p in functional) == 661
    # 1. The problems JSONL contract preserves arguments and expected values exactly.
    for p in functional:
        q = problem_from_json(json.loads(p.dumps()))
        assert [t.args for t in q.tests] == [t.args for t in p.tests]
        assert [t.expected for t in q.tests] == [t.expected for t in p.tests]
        assert q.entry_point == p.entry_point and p.entry_point.startswith("Solution.")
    # 2. Inside the sandbox, Solution().<method>(*args) receives exactly the decoded arguments:
    #    a solution that returns its arguments gives them back unchanged.
    echo = "class Solution:\n    def __getattr__(self, name):\n        return lambda *a: list(a)\n"
    runs = executor.run([(p, echo) for p in functional])
    for p, r in zip(functional, runs):
        assert r.ok, (p.id, r.detail)
        assert r.outputs == [list(t.args) for t in p.tests], p.id
    # 3. Expected values survive the trip and compare equal: a lookup-table solution keyed by
    #    the arguments' JSON returns each test's expected output and passes every test.
    items = []
    for p in functional:
        table = {json.dumps(t.args): t.expected for t in p.tests}
        code = ("import json\nTABLE = json.loads(%r)\nclass Solution:\n    def __getattr__(self, name):\n"
                "        return lambda *a: TABLE[json.dumps(list(a))]\n" % json.dumps(table))
        items.append((p, Sample(p.id, "table", code)))
    verdicts = executor.verify(items, early_exit=False)
    assert [v.problem_id for v in verdicts if not v.passed] == []


# ------------------------------------------------------------------------------------------------
# Official hub schema, generated here, with compressed private tests
# ------------------------------------------------------------------------------------------------

@pytest.fixture
def fixture_file(tmp_path):
    return write_rows(tmp_path / "test.jsonl", official_rows())


def test_official_schema_with_compressed_private_tests(fixture_file):
    b = load_lcb(fixture_file, window="all")
    assert [p.id for p in b.problems] == ["abc999_a", "9001", "1999_Z"]
    add, mx, rev = b.problems
    assert (add.kind, len(add.tests), add.metadata["n_private"]) == ("stdin", 4, 3)
    assert add.tests[1].stdin == "10 20\n" and add.tests[1].expected == "30\n"
    assert (mx.kind, mx.entry_point, len(mx.tests)) == ("call", "Solution.largest", 4)
    assert mx.tests[2].args == [[-3, -1, -2], 3] and mx.tests[2].expected == -1
    assert rev.metadata["n_private"] == 1  # plain-JSON private tests also accepted
    assert b.notes == []  # all private tests present
    assert b.version == "release_v1"  # inferred from the official file name
    assert [len(p.tests) for p in load_lcb(fixture_file, window="all", tests="public").problems] == [1, 1, 1]
    assert [len(p.tests) for p in load_lcb(fixture_file, window="all", tests="private").problems] == [3, 3, 1]


def test_fixture_windows_and_platforms(fixture_file):
    assert [p.id for p in load_lcb(fixture_file, window="test").problems] == ["abc999_a", "1999_Z"]
    assert [p.id for p in load_lcb(fixture_file, window="train").problems] == ["9001"]
    assert [p.id for p in load_lcb(fixture_file, window="all", platforms="codeforces").problems] == ["1999_Z"]
    assert [p.id for p in load_lcb(fixture_file, date_from="2024-09-01", date_to="2024-09-02").problems] == ["abc999_a"]
    assert load_lcb(fixture_file, date_from="2024-09-02", date_to="2025-01-15").problems == []


def test_fixture_scores_through_the_executor(fixture_file, executor):
    from selfplay_core.evaluation.runner import EvalConfig, evaluate

    b = load_lcb(fixture_file, window="all")
    samples = [Sample(pid, "right", code) for pid, code in SOLUTIONS.items()]
    samples += [Sample(pid, "wrong", code) for pid, code in WRONG.items()]
    run = evaluate(b, executor, EvalConfig(ks=[1, 2]), samples=samples)
    assert run.report["metrics"] == {"pass@1": 0.5, "pass@2": 1.0}
    assert run.report["breakdown"]["platform"]["leetcode"] == {"n_problems": 1, "pass@1": 0.5, "pass@2": 1.0}
    # The wrong LeetCode answer fails on a private test (public test passes: nums[0] == max).
    row = next(r for r in run.results if r["problem_id"] == "9001")
    assert row["verdicts"] == {"passed": 1, "wrong_answer": 1}


def test_release_directory_layout(tmp_path):
    rows = official_rows()
    write_rows(tmp_path / "test.jsonl", rows[:2])
    write_rows(tmp_path / "test2.jsonl", rows[2:])
    assert len(load_lcb(tmp_path, release="release_v1", window="all").problems) == 2
    v2 = load_lcb(tmp_path, release="release_v2", window="all")
    assert len(v2.problems) == 3 and v2.version == "release_v2"
    assert len(load_lcb(tmp_path, release="v2", window="all").problems) == 1
    assert load_lcb(tmp_path, window="all").version == "release_v2"  # all files, inferred
    with pytest.raises(InputError, match="test3.jsonl: file not found"):
        load_lcb(tmp_path, release="release_v3")


def test_release_tags():
    assert release_files("release_v5") == ["test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl"]
    assert release_files("release_latest") == release_files("release_v6")
    assert release_files("v1") == ["test.jsonl"] and release_files("v4") == ["test4.jsonl"]
    with pytest.raises(InputError, match="unknown LiveCodeBench release 'release_v9'; known: v1"):
        release_files("release_v9")


def test_hub_loading_fails_clearly_when_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", os.path.join(os.environ.get("TMPDIR", "/tmp"), "no-such-hf-home"))
    with pytest.raises(InputError, match=r"could not fetch livecodebench/code_generation_lite/test.jsonl .*--data"):
        load_lcb(release="release_v1")
    with pytest.raises(InputError, match="unknown LiveCodeBench release"):
        load_lcb(release="release_v0")


# ------------------------------------------------------------------------------------------------
# Private-test decoding is narrow, and bad rows give one clear error naming file, line and field
# ------------------------------------------------------------------------------------------------

class _Boom:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_private_tests_round_trip_and_refuse_code():
    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    assert json.loads(unpack_private_tests(pack_private_tests(tests))) == tests
    evil = base64.b64encode(zlib.compress(pickle.dumps(_Boom()))).decode()
    with pytest.raises(ValueError, match="refusing to load global"):
        unpack_private_tests(evil)
    not_str = base64.b64encode(zlib.compress(pickle.dumps([1, 2]))).decode()
    with pytest.raises(ValueError, match="pickle holds list, expected a JSON string"):
        unpack_private_tests(not_str)
    bomb = base64.b64encode(zlib.compress(pickle.dumps("x" * 5000))).decode()
    with pytest.raises(ValueError, match="decompresses to more than 1000 bytes"):
        unpack_private_tests(bomb, limit=1000)
    with pytest.raises(ValueError, match="not base64"):
        unpack_private_tests("!!!")


@pytest.mark.parametrize("mutate,message", [
    (lambda r: r.update(private_test_cases=base64.b64encode(zlib.compress(pickle.dumps(_Boom()))).decode()),
     r":2: field 'private_test_cases': not a plain pickled string \(refusing to load global"),
    (lambda r: r.pop("question_content"), r":2: field 'question_content' missing"),
    (lambda r: r.update(public_test_cases='[{"input": "1", "output": "2", "testtype": "magic"}]'),
     r":2: field 'public_test_cases\[0\].testtype' must be 'stdin' or 'functional'"),
    (lambda r: r.update(public_test_cases='[{"input": "[1,\\n3", "output": "2", "testtype": "functional"}]'),
     r":2: field 'public_test_cases\[0\]'.input: not one JSON value per line"),
    (lambda r: r.update(metadata="{}", starter_code=""),
     r":2: field 'metadata.func_name'"),
    (lambda r: r.update(contest_date="yesterday"), r":2: field 'contest_date': not an ISO date"),
    (lambda r: r.update(platform="topcoder"), r":2: field 'platform' must be one of"),
    (lambda r: r.update(question_id="abc999_a"), r":2: field 'question_id': duplicate id 'abc999_a' \(first at .*:1\)"),
])
def test_malformed_rows_name_file_line_and_field(tmp_path, mutate, message):
    rows = official_rows()
    mutate(rows[1])
    path = write_rows(tmp_path / "test.jsonl", rows)
    with pytest.raises(InputError, match=message):
        load_lcb(path, window="all")


def test_bad_files_and_arguments(tmp_path):
    with pytest.raises(InputError, match="nope.jsonl: file not found"):
        load_lcb(tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question_content": "x"}\n{not json\n')
    with pytest.raises(InputError, match=r"bad.jsonl:1: field 'question_id' is missing"):
        load_lcb(bad)
    bad.write_text("[1, 2]\n")
    with pytest.raises(InputError, match=r"bad.jsonl:1: expected a JSON object"):
        load_lcb(bad)
    with pytest.raises(InputError, match="unknown window"):
        load_lcb(window="recent")
    with pytest.raises(InputError, match="platform: unknown value"):
        load_lcb(platforms="hackerrank")
    with pytest.raises(InputError, match="empty date window"):
        load_lcb(date_from="2025-01-01", date_to="2024-01-01")
    with pytest.raises(InputError, match="date_from: not an ISO date"):
        load_lcb(date_from="Jan 2025")


def test_rows_without_tests_are_counted_not_dropped(tmp_path):
    rows = official_rows()
    rows[0]["public_test_cases"] = "[]"
    rows[0]["private_test_cases"] = None
    b = load_lcb(write_rows(tmp_path / "t.jsonl", rows), window="all")
    assert [p.id for p in b.problems] == ["9001", "1999_Z"]
    assert b.skipped_counts() == {"no all tests": 1} and b.skipped[0].where.endswith(":1")


def test_private_tests_of_filtered_out_rows_are_not_decoded(tmp_path):
    rows = official_rows()
    rows[0]["private_test_cases"] = "bm90IHpsaWI="   # row 1 (2024-09, test window): undecodable
    path = write_rows(tmp_path / "t.jsonl", rows)
    assert [p.id for p in load_lcb(path, window="train").problems] == ["9001"]
    with pytest.raises(InputError, match=r":1: field 'private_test_cases': not zlib data"):
        load_lcb(path, window="test")


# ------------------------------------------------------------------------------------------------
# Issue 11, class 6: problems whose every test is in the statement are no training task
# ------------------------------------------------------------------------------------------------

from selfplay_core.datasets.livecodebench import every_test_shown  # noqa: E402
from selfplay_core.problems import Problem, TestCase  # noqa: E402

STATEMENT = ("Given N, print 2N.\n\nSample Input 1\n\n3\n\nSample Output 1\n\n6\n\n"
             "Sample Input 2\n\n10 \n\nSample Output 2\n\n20\n")


def test_a_problem_is_shown_only_when_every_test_is_in_the_statement():
    shown = Problem(id="a", kind="stdin", prompt=STATEMENT,
                    tests=[TestCase(stdin="3\n", expected="6\n"), TestCase(stdin="10\n", expected="20\n")])
    assert every_test_shown(shown)
    hidden = Problem(id="b", kind="stdin", prompt=STATEMENT,
                     tests=shown.tests + [TestCase(stdin="123456\n", expected="246912\n")])
    assert not every_test_shown(hidden)
    # LeetCode-style: arguments spaced differently in the statement than in the test's JSON
    leet = Problem(id="c", kind="call", entry_point="Solution.f",
                   prompt='Example 1:\nInput: nums = [1, 2, 3], target = "a b"\nOutput: true\n',
                   tests=[TestCase(args=[[1, 2, 3], "a b"], expected=True)])
    assert every_test_shown(leet)
    leet_hidden = Problem(id="d", kind="call", entry_point="Solution.f", prompt=leet.prompt,
                          tests=leet.tests + [TestCase(args=[[9, 8, 7, 6], "zz"], expected=False)])
    assert not every_test_shown(leet_hidden)


ECHO_STDIN = """
import sys
SAMPLES = {samples!r}
data = " ".join(sys.stdin.read().split())
print(SAMPLES.get(data, ""))
"""

ECHO_CALL = """
import json
SAMPLES = {samples!r}
class Solution:
    def __getattr__(self, name):
        def f(*args):
            return json.loads(SAMPLES.get(json.dumps(list(args)), "null"))
        return f
"""

_STDIN_SAMPLE = re.compile(r"Sample Input (\d+):?[ \t]*\n(.*?)\n\s*Sample Output \1:?[ \t]*\n(.*?)"
                           r"(?=\n\s*(?:Sample Input|Note|Constraints)|\Z)", re.S)
_CALL_SAMPLE = re.compile(r"Input:\s*(.*?)\nOutput:\s*(.*?)\n")


def statement_samples(p):
    """The sample blocks as a reader of the statement sees them (parsed from the text alone)."""
    if p.kind == "stdin":
        return {" ".join(i.split()): o.strip() for _, i, o in _STDIN_SAMPLE.findall(p.prompt)}
    out = {}
    for args_text, result in _CALL_SAMPLE.findall(p.prompt + "\n"):
        try:
            args = [json.loads(part.split(" = ", 1)[1])
                    for part in re.split(r", (?=\w+ = )", args_text.strip())]
            out[json.dumps(args)] = json.dumps(json.loads(result.strip()))
        except (ValueError, IndexError):
            continue
    return out


def echo_program(p):
    """A program that knows only the statement's samples and answers them, nothing else."""
    tmpl = ECHO_STDIN if p.kind == "stdin" else ECHO_CALL
    return tmpl.format(samples=statement_samples(p))


def test_no_training_task_left_can_be_passed_by_echoing_the_samples(executor):
    train = load_lcb(window="train").problems
    verdicts = executor.verify([(p, Sample(p.id, "echo", echo_program(p))) for p in train])
    echoed = {v.problem_id for v in verdicts if v.passed}
    assert len(echoed) >= 33  # the measure on 40 problems; most of the 424 here
    tasks = [p for p in train if not every_test_shown(p)]
    assert not echoed & {p.id for p in tasks}, "an echo of the samples passes a training task"
    # What remains for training is counted: here (public tests only) nearly nothing.
    assert len(tasks) < len(train) - len(echoed) + 1


def test_private_tests_make_a_problem_a_training_task_again(tmp_path):
    rows = official_rows()
    path = write_rows(tmp_path / "official.jsonl", rows)
    bench = load_lcb(path, window="all")
    with_private = [p for p in bench.problems if p.metadata["n_private"] > 0]
    assert with_private and not any(every_test_shown(p) for p in with_private)


def test_the_real_data_world_trains_on_no_problem_whose_tests_are_all_shown(caplog):
    import logging

    from selfplay_core.config import load_config
    from selfplay_core.worlds.lcb import RealWorld

    cfg = load_config(None, ["world.name=lcb", "world.eval_sets=[lcb]", "method=gasp+rlvr",
                             "student.real_tasks_per_iteration=1"])
    with caplog.at_level(logging.WARNING, logger="selfplay_core.loop.worlds"):
        world = RealWorld(cfg)
    shown = [p for p in world.train if every_test_shown(p)]
    assert shown, "the shared data has public tests only: most problems show every test"
    assert {p.id for p in world.real_tasks} == {p.id for p in world.train} - {p.id for p in shown}
    # counted and reported at start-up
    assert world.dropped["real_tasks"] == {"every_test_shown_in_the_statement": len(shown)}
    assert f"({len(shown)} with every test in the statement left out)" in world.splits()["real_tasks"].version
    assert any(f"{len(shown)} of {len(world.train)} training problems are not used" in r.getMessage()
               for r in caplog.records)
