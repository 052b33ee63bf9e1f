"""A described task is posed with its reference's function header, so a proposal whose program
takes several arguments can be solved (the header used to be a hard-coded `def f(x):`)."""

import pytest

from selfplay_core import stages as S
from selfplay_core.config import load_config
from selfplay_core.engines.base import Completion
from selfplay_core.problems import Problem, TestCase
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.roles.common import signature_of
from selfplay_core.run_context import RunContext
from selfplay_core.solve import signature_for, solve, student_prompt_for

SIGNATURES = [
    ("def f(x):\n    return x\n", "def f(x):"),
    ("import math\n\n@cache\ndef f(a, b):\n    return a + b\n", "def f(a, b):"),
    ("def f(xs: list[int], k: int = 2) -> int:\n    return xs[k]\n", "def f(xs: list[int], k: int=2) -> int:"),
    ("def g(x):\n    return x\n\ndef f(s,\n      t):\n    return g(s) + t\n", "def f(s, t):"),
    ("async def f(x):\n    return x\n", "async def f(x):"),
    ("def g(x):\n    return x\n", None),          # no f
    ("def f(x:\n", None),                         # does not parse
]


@pytest.mark.parametrize("code,header", SIGNATURES)
def test_signature_of_the_reference(code, header):
    assert signature_of(code, "f") == header


def test_the_problem_s_own_signature_wins_then_its_reference_s():
    p = Problem("p", "call", [], entry_point="f", prompt="Add.",
                metadata={"reference": "def f(a, b):\n    return a + b\n"})
    assert signature_for(p) == "def f(a, b):"
    assert student_prompt_for(p).endswith("### Solution\ndef f(a, b):\n")
    p.metadata["signature"] = "def f(u, v):"
    assert signature_for(p) == "def f(u, v):"
    with pytest.raises(ValueError, match="no metadata\\['signature'\\] and no reference"):
        signature_for(Problem("q", "call", [], entry_point="f"))


class Answers:
    """Answers each student prompt with the body for its header (a real solution would)."""

    def __init__(self, bodies):
        self.bodies, self.prompts = bodies, []

    def generate(self, prompts, n, sampling):
        self.prompts += prompts
        return [[Completion(next(b for h, b in self.bodies.items() if h in p))] * n for p in prompts]


def test_a_two_argument_proposal_is_validated_posed_and_solved(executor):
    text = ("### Task\nAdd the two numbers, then double.\n### Solution\ndef f(a, b):\n"
            "    return 2 * (a + b)\n### Inputs\n(1, 2)\n(3, 4)\n(5, -6)\n(0, 7)\n### End\n")
    p = Proposal("lemma", Anchor("g", "q", "c"), "f", "easier", "", Completion(text), id="p0")
    ctx = RunContext(load_config(None), executor=executor,
                     engine=Answers({"def f(a, b):": "    return 2 * (a + b)\n"}))
    log = IterationLog()
    S.validate(ctx, [p], log)
    assert p.accepted, p.rejection
    assert [tc.args for tc in p.problem.tests] == [[1, 2], [3, 4], [5, -6], [0, 7]]
    assert [tc.expected for tc in p.problem.tests] == [6, 14, -2, 14]     # made by the executor
    assert p.problem.metadata["signature"] == "def f(a, b):"
    S.estimate_pass_rates(ctx, [p])
    assert ctx.engine.prompts == ["### Task\nAdd the two numbers, then double.\n### Solution\ndef f(a, b):\n"]
    assert p.pass_rate == 1.0 and p.solve.passed == [True] * 8


def test_the_old_one_argument_header_cannot_solve_it(executor):
    """What happened before: posed as `def f(x):`, the same correct body fails every test."""
    prob = Problem("p", "call", [TestCase(args=[1, 2], expected=6)], entry_point="f", prompt="Add.",
                   metadata={"signature": "def f(x):", "reference": "def f(a, b):\n    return 2 * (a + b)\n"})
    res = solve(Answers({"def f(x):": "    return 2 * (a + b)\n"}), executor, [prob], 2,
                S.SamplingParams(temperature=1.0))
    assert res[0].passed == [False, False]
