"""Issue 11, class 3: the child's channel is untrusted.

A child's lines follow a strict grammar checked by the worker (which assigns test indices and
times itself), and result values are decoded by the parent against a strict, size-bounded
schema. Anything else is that sample's runtime error: never a harness error, never another
sample's problem, never unbounded work or memory in the parent.
"""

import resource

import pytest

from sandbox_helpers import GOOD, contained, double_problem, run
from selfplay_core.problems import Problem, Sample, TestCase, Verdict
from selfplay_core.sandbox.channel import BadRecord, MAX_CONTAINERS, decode_output

pytestmark = pytest.mark.security

# f() writes PAYLOAD (bytes) to every pipe it holds (the result channel is one of them), then
# ends the process so that nothing else is written.
WRITER = """
import os
def _pipes():
    out = []
    for fd in range(3, 64):
        try:
            if os.readlink('/proc/self/fd/%d' % fd).startswith('pipe:'):
                out.append(fd)
        except OSError:
            pass
    return out
def f(x):
    data = PAYLOAD
    for fd in _pipes():
        while data:
            try:
                data = data[os.write(fd, data):]
            except OSError:
                break
    os._exit(0)
"""


def writer(payload: bytes) -> str:
    return WRITER.replace("PAYLOAD", repr(payload))


FORGED_LINES = [
    b"H the harness failed\n",                         # a harness error claimed after start
    b'{"c": "harness", "m": "forged"}\n',              # the old record format
    b"E 1 {\"status\": \"harness\"}\n",                # the worker's own framing
    b"R 1 0 0.0 0.0 O 2\n",
    b"Z unknown record type\n",
    b"E\n",                                            # malformed exception lines
    b"E " + b"x" * 200 + b" too long a name\n",
    b"E bad-name! msg\n",
    b"S\n",                                            # a second start
    b"L\n",
    b"O" + b"1" * 5000 + b"\n",                        # no separator
]


@pytest.mark.parametrize("line", FORGED_LINES, ids=range(len(FORGED_LINES)))
def test_forged_or_broken_lines_are_the_samples_runtime_error(ex1, line):
    before = dict(ex1.stats)
    v = contained(ex1, double_problem(), writer(line), {Verdict.runtime_error})
    assert v.detail == "program corrupted the result channel", v.to_json()
    # no harness error was counted, none retried
    assert [ex1.stats[k] - before[k] for k in ("harness_errors", "harness_retries")] == [0, 0]


BAD_VALUES = [
    b'{"__s__":[[1]]}',                        # an unhashable set element
    b'{"__d__":[[[1,2],3]]}',                  # a list as a dict key
    b'{"__d__":[[{"__s__":[]},3]]}',           # a set as a dict key
    b'{"__c__":[{"__i__":"0x' + b"f" * 3000 + b'"},1]}',   # a complex of huge ints
    b'{"__c__":[1,2,3]}',
    b'{"__c__":"1+2j"}',
    b"1" * 400,                                # a 400-digit decimal integer
    b"-" + b"9" * 1_200_000,                   # 1.2 million digits (once 38 s of parsing)
    b"1." + b"0" * 100 + b"1",                 # an over-long float literal
    b"[" * 100_000 + b"]" * 100_000,           # deep nesting
    b'{"a": 1}',                               # a plain object: every object must be a tag
    b'{"__t__": 5}',
    b'{"__t__":[1],"__s__":[1]}',
    b'{"__b__":"\\u0100"}',                    # bytes beyond latin-1
    b'{"__i__":"0xZZ"}',
    b'{"__i__":"12"}',
    b'{"__h__":"not a digest"}',
    b'{"__o__":"' + b"x" * 500 + b'"}',
    b'{"__x__":1}',
    b"[1, 2",                                  # not JSON
    b"\xff\xfe",                               # not ASCII
    b"[" + b"[]," * 1_500_000 + b"[]]",        # 1.5 M containers from 4.5 MB
]


def test_malformed_values_fail_their_sample_only_and_keep_the_parent_bounded(ex):
    # All in one batch with correct samples around them: none of them may crash the batch,
    # stall it, or make the parent's memory grow by much (a record is at most 16 MB).
    p = double_problem(memory_limit_mb=512)
    items = []
    for k, bad in enumerate(BAD_VALUES):
        items.append((p, Sample(p.id, f"good{k}", GOOD)))
        items.append((p, Sample(p.id, f"bad{k}", writer(b"O " + bad + b"\n"))))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    verdicts = ex.verify(items)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for v in verdicts:
        if str(v.sample_id).startswith("good"):
            assert v.passed, v.to_json()
        else:
            assert v.verdict is Verdict.runtime_error, (v.sample_id, v.to_json())
            assert "malformed result" in (v.detail or ""), v.detail
    assert (rss1 - rss0) < 200 * 1024, f"parent grew by {(rss1 - rss0) // 1024} MB"


@pytest.mark.parametrize("bad", BAD_VALUES[:20], ids=range(20))
def test_the_decoder_refuses_each_malformed_value(bad):
    with pytest.raises(BadRecord):
        decode_output(bad)


def test_the_decoder_keeps_what_the_encoder_makes():
    from selfplay_core.sandbox.worker import encode_value
    for v in [1, -5, 10**300, 2.5, float("inf"), "s", b"\x00\xff", (1, (2,)), {1: {2: "x"}},
              {frozenset({1}), (1, 2)}, [None, True], complex(1, -2), {(1, 2): [3.0]}]:
        assert decode_output(encode_value(v).encode()) == v
    assert MAX_CONTAINERS >= 1 << 20


def test_flooding_the_channel_is_bounded_by_the_output_cap(ex1):
    # 64 MB on one line (no newline): the worker stops reading at the 16 MB cap.
    code = ("import os\n"
            "def f(x):\n"
            "    for fd in range(3, 64):\n"
            "        try:\n"
            "            if os.readlink('/proc/self/fd/%d' % fd).startswith('pipe:'):\n"
            "                for _ in range(64):\n"
            "                    os.write(fd, b'O ' + b'1' * (1 << 20))\n"
            "        except OSError:\n"
            "            pass\n"
            "    return 2 * x\n")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    contained(ex1, double_problem(memory_limit_mb=512), code, {Verdict.output_limit})
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 100 * 1024


def test_many_records_of_no_use_are_not_buffered(ex1):
    # 400k well-formed exception lines: the first four are the four tests' results, the job
    # ends there; nothing of the rest is kept anywhere.
    code = ("import os\n"
            "def f(x):\n"
            "    line = b'E ValueError ' + b'm' * 200 + b'\\n'\n"
            "    for fd in range(3, 64):\n"
            "        try:\n"
            "            if os.readlink('/proc/self/fd/%d' % fd).startswith('pipe:'):\n"
            "                for _ in range(400000):\n"
            "                    os.write(fd, line)\n"
            "        except OSError:\n"
            "            pass\n"
            "    return 2 * x\n")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    v = contained(ex1, double_problem(), code, {Verdict.runtime_error})
    assert "ValueError" in (v.detail or "")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 100 * 1024


STDIN = Problem(id="echo", kind="stdin", time_limit_s=1.0,
                tests=[TestCase(stdin="3\n", expected="6\n"), TestCase(stdin="4\n", expected="8\n")])

STDIN_ATTACKS = [
    # the right answer printed, then a hang: past the limit is not a pass
    ("import time\nprint(2 * int(input()), flush=True)\ntime.sleep(60)\n", {Verdict.timeout}),
    # the right answer printed, then death by a signal
    ("import os, signal, sys\nprint(2 * int(input()))\nsys.stdout.flush()\n"
     "os.kill(os.getpid(), signal.SIGSEGV)\n", {Verdict.runtime_error}),
    # the right answer printed, then a non-zero exit that skips Python's own exit handling
    ("import os, sys\nprint(2 * int(input()))\nsys.stdout.flush()\nos._exit(3)\n",
     {Verdict.runtime_error}),
    # a forged stdout record on the result channel, then a clean exit: a sample's tests share
    # a runner, so the record is this test's answer (as if printed); the next test gets none
    (WRITER.replace("PAYLOAD", repr(b'S "6\\n"\n')) + "f(0)\n",
     {Verdict.runtime_error, Verdict.wrong_answer}),
    # a forged "done" in the old format, then a hang
    (WRITER.replace("PAYLOAD", repr(b'{"i": 0}\n')).replace("os._exit(0)", "import time; time.sleep(60)")
     + "print(6)\nf(0)\n", {Verdict.runtime_error, Verdict.timeout}),
]


@pytest.mark.parametrize("code,allowed", STDIN_ATTACKS, ids=range(len(STDIN_ATTACKS)))
def test_a_stdin_child_that_misbehaves_after_its_output_does_not_pass(ex1, code, allowed):
    contained(ex1, STDIN, code, allowed)
    good = run(ex1, STDIN, "print(2 * int(input()))\n")
    assert good.passed, good.to_json()
