"""Class 4: whatever a job leaves in its scratch dir is removed by the trusted side in a way
that cannot fail on untrusted content; it never becomes a harness error of that job or of the
sample queued behind it on the same worker."""

from __future__ import annotations

import pytest

from selfplay_core.problems import Problem, Sample, TestCase, Verdict

from sandbox_helpers import GOOD, NOT_PASSED, double_problem, sandbox_pids

pytestmark = pytest.mark.security

DEEP = '''
import os
def f(x):
    for _ in range({depth}):
        os.mkdir("d")
        os.chdir("d")
    return x + 1
'''

LOCKED = '''
import os
def f(x):
    for k in range(3):
        os.makedirs("a%d/b/c" % k)
        for j in range(50):
            open("a%d/b/c/f%d" % (k, j), "w").write("x")
        os.chmod("a%d/b/c" % k, 0)
        os.chmod("a%d/b" % k, 0o100)
        os.chmod("a%d" % k, 0)
    os.symlink("/", "root")
    os.symlink("loop", "loop")
    os.mkfifo("fifo")
    open("name\\nwith newline", "w").close()
    os.chmod(".", 0o500)
    return x + 1
'''

MANY = '''
import os
def f(x):
    for i in range(20000):
        open("f%05d" % i, "w").close()
    return x + 1
'''


def _batch(ex, code):
    """The attack (wrong: returns x + 1) and a correct sample sent behind it, on one worker."""
    p = double_problem()
    return ex.verify([(p, Sample(p.id, "attack", code)), (p, Sample(p.id, "next", GOOD))])


@pytest.mark.parametrize("code", [DEEP.format(depth=1400), DEEP.format(depth=5000), LOCKED, MANY],
                         ids=["deep-1400", "deep-5000", "locked", "many"])
def test_leftovers_are_the_attacks_own_failure_and_never_its_neighbours(ex1, code):
    for _ in range(2):
        attack, nxt = _batch(ex1, code)
        assert attack.verdict in NOT_PASSED, attack.to_json()
        assert nxt.passed, nxt.to_json()
    assert sandbox_pids(ex1) == []


def test_a_correct_program_that_leaves_a_deep_tree_still_passes(ex1):
    code = DEEP.format(depth=2000).replace("return x + 1", "return 2 * x")
    v = ex1.verify([(double_problem(), Sample("double", "deep", code))])[0]
    assert v.passed, v.to_json()
    good = ex1.verify([(double_problem(), Sample("double", "good", GOOD))])[0]
    assert good.passed


def test_stdin_tests_start_clean_after_a_deep_tree(ex1):
    # Each test sees a fresh scratch dir: a tree left by test 1 is gone for test 2.
    code = ("import os\n"
            "n = int(input())\n"
            "print(int(not os.path.exists('d')))\n"
            "for _ in range(1500):\n"
            "    os.mkdir('d'); os.chdir('d')\n")
    p = Problem(id="s", kind="stdin", time_limit_s=5.0,
                tests=[TestCase(stdin=f"{k}\n", expected="1\n") for k in range(3)])
    good = Problem(id="g", kind="stdin", time_limit_s=5.0,
                   tests=[TestCase(stdin="5\n", expected="5\n")])
    v = ex1.verify([(p, Sample("s", "deep", code)), (good, Sample("g", "next", "print(input())\n"))])
    # the tree test 1 left is gone when test 2 starts
    assert v[0].passed, v[0].to_json()
    assert v[1].passed, v[1].to_json()
    assert sandbox_pids(ex1) == []
