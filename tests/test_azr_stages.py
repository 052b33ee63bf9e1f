"""The AZR deduction/abduction validation gate, through the real executor: each way a proposal
can be unusable is rejected with its own reason, counted per task type."""

import pytest

from selfplay_core.buffers import BufferItem, TaskBuffer
from selfplay_core.config import load_config
from selfplay_core.engines.base import Completion
from selfplay_core.methods.azr import Learnability
from selfplay_core.methods.azr_triplets import TripletRound
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.run_context import RunContext


def prop(text, i):
    return Proposal("azr_deduction", Anchor("azr-seed", "", ""), "", "propose", "",
                    Completion(text), id=f"p{i}")


def program(body, inp="[1, 2, 3]"):
    return f"### Program\ndef f(x):\n{body}\n### Input\n{inp}\n### End"


CASES = [
    (program("    return sorted(x)"), None),
    (program("    return x[::-1]", "[4, 5]"), None),
    ("no sections at all", "parse_missing_program"),
    (program("    import os\n    return os.getcwd()"), "banned_import"),
    (program("    return 1 / 0"), "reference_error"),
    (program("    while True:\n        pass"), "reference_timeout"),
    (program("    return hash('abc')"), "nondeterministic"),  # str hashes differ per process
    (program("    return float('nan')"), "output_not_a_literal"),
    (program("    class A:\n        def __eq__(s, o):\n            return True\n    return A()"),
     "nondeterministic"),  # an object travels as an opaque marker that equals nothing
    (program("    return list(range(10000))"), "output_too_large"),
    (program("    return sorted(x)", "[3, 2, 1]"), None),               # same program, new input
    (program("    return sorted(x)", "[1, 2, 3]"), "near_duplicate"),   # a batch-mate's twin
    (program("    return [v * 7 for v in x]"), "near_duplicate"),       # the buffer's twin
]


@pytest.fixture
def ctx(executor):
    cfg = load_config(None, ["method=azr", "method.task_types=[deduction]"])
    buffers = TaskBuffer(threshold=0.95)
    code = "def f(x):\n    return [v * 7 for v in x]\n"
    buffers.add(BufferItem("old", "azr_deduction", "", code, [[[1, 2, 3]]], [[7, 14, 21]],
                           extra={"text": code + "\n[1, 2, 3]"}))
    buffers.add(BufferItem("other", "azr_abduction", "", "def f(x):\n    return x[::-1]\n",
                           [[[4, 5]]], [[5, 4]], extra={"text": "def f(x):\n    return x[::-1]\n\n[4, 5]"}))
    return RunContext(cfg, executor=executor, buffers=buffers)


def test_gate_rejects_each_unusable_proposal_by_reason(ctx):
    props = [prop(text, i) for i, (text, _) in enumerate(CASES)]
    log = IterationLog()
    rnd = TripletRound("deduction", len(CASES), ctx.config.method, Learnability(-0.5))
    rnd.validate(ctx, props, log)
    got = [p.rejection for p in props]
    assert got == [why for _, why in CASES]
    ok = props[0].problem
    assert ok.tests[0].args == [[1, 2, 3]] and ok.tests[0].expected == [1, 2, 3]
    assert ok.prompt.endswith("### Input\n[1, 2, 3]\n### Output\n")
    # Only the abduction buffer has the reversing program: it is not a deduction duplicate.
    assert props[1].accepted
    assert log.metrics["teacher/azr_deduction/proposals"] == len(CASES)
    assert log.metrics["teacher/azr_deduction/accepted"] == 3
    assert log.metrics["rejections/azr_deduction/near_duplicate"] == 2
