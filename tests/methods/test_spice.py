"""SPICE / SCOPE: the Challenger reward and advantages as tables (values by hand from the
formulas), the Challenger and grade parsers, the judge-executor agreement statistics, and the
document gate against the real sandbox."""

import math

import pytest

from selfplay_core import rewards
from selfplay_core.config import load_config
from selfplay_core.datasets.documents import Document
from selfplay_core.toyworld.library import toy_documents
from selfplay_core.engines.base import Completion
from selfplay_core.methods.base import method_for
from selfplay_core.methods.scope import agreement_stats
from selfplay_core.methods.spice import DocumentRound, challenger_rewards
from selfplay_core.problems import Problem
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.roles import spice as role
from selfplay_core.roles.common import Rejection
from selfplay_core.run_context import RunContext

# exp(-(p(1-p) - 0.25)^2 / 0.02), worked by hand:
#   p = 1/2: Var = 0.25, exponent 0                         -> 1
#   p = 0 or 1: Var = 0, (0.25)^2 / 0.02 = 3.125             -> e^-3.125
#   p = 1/4: Var = 3/16 = 0.1875, (0.0625)^2 / 0.02 = 0.1953125
#   p = 1/8: Var = 7/64 = 0.109375, (0.140625)^2 / 0.02 = 0.98876953125
SPICE_TABLE = [(0.5, 1.0), (0.0, math.exp(-3.125)), (1.0, math.exp(-3.125)),
               (0.25, math.exp(-0.1953125)), (0.75, math.exp(-0.1953125)),
               (0.125, math.exp(-0.98876953125))]


@pytest.mark.parametrize("p,expected", SPICE_TABLE)
def test_the_challenger_reward(p, expected):
    assert rewards.spice_challenger(p) == pytest.approx(expected, rel=1e-12)


def test_invalid_proposals_get_the_penalty_and_p_is_checked():
    assert challenger_rewards([0.5, None, 0.0]) == pytest.approx([1.0, -0.1, math.exp(-3.125)])
    assert challenger_rewards([None], invalid=-0.3) == [-0.3]
    with pytest.raises(ValueError):
        rewards.spice_challenger(1.5)


def _completion(n_tokens):
    return Completion("x", list(range(1, n_tokens + 1)), [-0.5] * n_tokens, "stop", [7, 8])


def _prop(doc_id, reward):
    p = Proposal("spice", Anchor(doc_id, "q", "c"), "", "document", "", _completion(3),
                 id=f"p-{doc_id}-{reward}")
    p.reward = reward
    return p


def test_dr_grpo_groups_the_challenger_by_document_and_the_reasoner_by_task():
    from selfplay_core.solve import SolveResult
    cfg = load_config(None, ["method=spice", "student.samples_per_task=4", "student.batch_size=32"])
    ctx = RunContext(cfg)
    method = method_for(cfg.method)
    props = [_prop("A", 1.0), _prop("A", 0.5), _prop("B", -0.1), _prop("B", -0.1), _prop("C", 0.2)]
    task = SolveResult(Problem("t1", "call", [], entry_point="f"), [_completion(2)] * 4,
                       [True, False, False, False])
    rolls = method.rollouts(ctx, props, [("spice", task)])
    adv = method.advantages(ctx, rolls)
    # Challenger: document A mean 0.75 -> +0.25, -0.25; B all equal -> 0; C alone -> 0.
    # Reasoner: task t1 mean 0.25 -> +0.75, -0.25 x 3 (Dr. GRPO: no division by the std).
    assert [r.meta["group"] for r in rolls[:5]] == ["A", "A", "B", "B", "C"]
    assert adv == pytest.approx([0.25, -0.25, 0.0, 0.0, 0.0, 0.75, -0.25, -0.25, -0.25])


DOC2 = Document("d2", 'def g(a, b):\n    """Sum."""\n    return a + b\n', "g", "Sum.", "def g(a, b):", 2)


@pytest.mark.parametrize("text,style,expected", [
    ("### Task\nAdd one.\n### Solution\ndef f(x): pass\n### Inputs\n(1, 2)\n(3, 4)\n(1, 2)\n5\n### End",
     "teacher", ("Add one.", [[1, 2], [3, 4]])),
    ("Add them.\n### Inputs\n(1, 2)\n(0, 0)\n", "document", ("Add them.", [[1, 2], [0, 0]])),
    ("Headerless question.\n### Inputs\n(1, 1)\n(2, 2)\n", "teacher", ("Headerless question.", [[1, 1], [2, 2]])),
    ("### Task\nAdd.\n### Inputs\n(1, 2)\n", "teacher", "too_few_inputs"),
    ("### Task\nAdd.\n", "teacher", "missing_inputs"),
    ("### Task\n\n### Inputs\n(1, 2)\n(2, 3)\n", "teacher", "empty_question"),
    ("", "teacher", "empty"),
])
def test_the_challenger_parser(text, style, expected):
    got = role.parse_challenger(text, DOC2, style=style, min_inputs=2)
    if isinstance(expected, str):
        assert isinstance(got, Rejection) and got.reason == expected
    else:
        assert (got.question, got.inputs, got.code) == (*expected, DOC2.source)


@pytest.mark.parametrize("text,score", [
    ("4/5", 0.8), ("Score: 3 out of 5.", 0.6), ("PASS", 1.0), ("The answer is incorrect", 0.0),
    ("0.75", 0.75), ("5", 1.0), ("grade 2", 0.4), ("correct, 1/5", 1.0), ("7 then 2/5", 0.4),
    ("3<|endoftext|>5/5", 0.6), ("no", 0.0),
])
def test_the_grade_parser_is_tolerant(text, score):
    assert role.parse_grade(text) == pytest.approx(score)


@pytest.mark.parametrize("text", ["", "def f(x):", "9", "\n### Task\n4/5"])
def test_an_unreadable_grade_is_a_rejection(text):
    assert isinstance(role.parse_grade(text), Rejection)


def test_judge_executor_agreement():
    # readable pairs (T,T) (F,T) (T,F): agreement 1/3; judge and executor pass 2/3 each, so
    # chance = 4/9 + 1/9 = 5/9 and kappa = (1/3 - 5/9) / (4/9) = -1/2. Counting the unreadable
    # grade as a fail: (T,T) (F,T) (F,F) (T,F) -> 2/4.
    s = agreement_stats([True, False, None, True], [True, True, False, False])
    assert s == pytest.approx({"pairs": 4, "parse_rate": 0.75, "executor_pass": 0.5,
                               "agreement_all": 0.5, "agreement": 1 / 3, "judge_pass": 2 / 3,
                               "kappa": -0.5})
    assert agreement_stats([True, True], [True, True])["kappa"] == 0.0   # chance agreement 1
    assert agreement_stats([], []) == {}


def test_explain_tasks_show_the_code_without_its_docstring():
    doc = toy_documents()[0]
    code = role.strip_docstring(doc.source, doc.entry_point)
    assert doc.description not in code and "x = [v + 1 for v in x]" in code
    assert role.explain_prompt(code).endswith("### Explain what this function does\n")


def test_the_document_gate_runs_the_documents_function(executor):
    """Expected outputs come from the document's code (run in the sandbox), whatever the
    Challenger writes as a solution; a wrong-typed input is the reference's error."""
    cfg = load_config(None, ["method=spice", "teacher.min_inputs=2"])
    ctx = RunContext(cfg, executor=executor)
    doc = next(d for d in toy_documents() if d.id == "toy:mul:3")
    rnd = DocumentRound([doc], cfg.method)

    def prop(text):
        return Proposal("spice", Anchor(doc.id, doc.description, doc.source), "", "document", "",
                        Completion(text), id=f"p{len(text)}")

    good = prop("### Task\nTriple each.\n### Solution\ndef f(x):\n    return x\n### Inputs\n[1, 2]\n[0]\n[]\n### End")
    typed = prop("### Task\nTriple the number.\n### Inputs\n5\n7\n### End")
    short = prop("### Task\nTriple.\n### Inputs\n[1]\n")
    log = IterationLog()
    rnd.validate(ctx, [good, typed, short], log)
    assert [tc.expected for tc in good.problem.tests] == [[3, 6], [0], []]
    assert good.problem.metadata["signature"] == "def f(x):" and good.problem.prompt == "Triple each."
    assert typed.rejection == "reference_error" and short.rejection == "parse_too_few_inputs"
    assert log.metrics["teacher/spice/accepted"] == 1


def test_a_code_file_document_is_called_by_its_own_name_with_all_its_arguments(executor):
    from selfplay_core.datasets.documents import documents_from_source

    src = ('from collections import Counter\n\n\ndef top(xs, k):\n    """The k most common values."""\n'
           '    return [v for v, _ in Counter(xs).most_common(k)]\n')
    (doc,) = documents_from_source(src, "m.py")
    cfg = load_config(None, ["method=spice", "teacher.min_inputs=2", "method.prompt=document"])
    ctx = RunContext(cfg, executor=executor)
    p = Proposal("spice", Anchor(doc.id, doc.description, doc.source), "", "document",
                 role.challenger_prompt(doc, "document"),
                 Completion("Most common values.\n### Inputs\n([3, 3, 1], 1)\n([2, 1, 1, 2, 2], 2)\n### End"),
                 id="p1")
    DocumentRound([doc], cfg.method).validate(ctx, [p], IterationLog())
    assert [tc.expected for tc in p.problem.tests] == [[3], [2, 1]]
    assert p.problem.entry_point == "top" and p.problem.metadata["signature"] == "def top(xs, k):"
    assert "### Document" in p.prompt and "`def top(xs, k):`" in p.prompt
