"""GASP with executor-edited lemmas (method gasp-edit): the edits the
executor makes (programs written out by hand), the forced program in the teacher's prompt and
never in its trained completion, the sandbox's outputs for the edited reference (computed by
hand), the config's refusals, and one real iteration on the committed toy model."""

import pytest

from selfplay_core.config import ConfigError, load_config
from selfplay_core.engines.base import Completion
from selfplay_core.methods.edited_lemmas import GASPEdit, StatementDeletionRound, forced_program
from selfplay_core.methods.gasp import BandReward
from selfplay_core.problems import Problem
from selfplay_core.program_edits import statement_deletions
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.rewards import r_lemma
from selfplay_core.run_context import RunContext

# The method's config: gasp-edit reads the goalposts' reference programs, so it is privileged.
EDIT = "configs/gasp-edit-tiny-cpu.yaml"

THREE_STEPS = "def f(x):\n    x = x - 5\n    x = x % 7\n    x = x * 4\n    return x\n"


@pytest.mark.parametrize("code, expected", [
    (THREE_STEPS, ["def f(x):\n    x = x % 7\n    x = x * 4\n    return x\n",
                   "def f(x):\n    x = x - 5\n    x = x * 4\n    return x\n",
                   "def f(x):\n    x = x - 5\n    x = x % 7\n    return x\n"]),
    # a compound statement goes whole; the docstring and the return stay; text outside f is kept
    ('import math\n\ndef f(xs):\n    """Doc."""\n    out = []\n    for v in xs:\n        out.append(v)\n'
     '    return out\n',
     ['import math\n\ndef f(xs):\n    """Doc."""\n    for v in xs:\n        out.append(v)\n    return out\n',
      'import math\n\ndef f(xs):\n    """Doc."""\n    out = []\n    return out\n']),
    # two statements on one line: no clean line edit of either
    ("def f(x):\n    a = 1; b = 2\n    return a + b\n", []),
    # the same statement twice: one program
    ("def f(x):\n    x = x + 1\n    x = x + 1\n    return x\n", ["def f(x):\n    x = x + 1\n    return x\n"]),
    # a body of a return alone, no function f, code that does not parse
    ("def f(x):\n    return x\n", []),
    ("def g(x):\n    x = x + 1\n    return x\n", []),
    ("def f(x):\n    x = (\n", []),
    # a final statement that is not a return can go
    ("def f(xs):\n    xs.sort()\n    print(xs)\n", ["def f(xs):\n    print(xs)\n", "def f(xs):\n    xs.sort()\n"]),
])
def test_statement_deletions(code, expected):
    assert statement_deletions(code) == expected


def anchor(code=THREE_STEPS, gid="g1"):
    return Anchor(gid, "Given a number, subtract 5, then take the remainder mod 7, then multiply by 4.",
                  code, goalpost_id=gid)


def lemma_round(per_anchor=2, anchors=None):
    return StatementDeletionRound("lemma", anchors or [anchor()], "easier", per_anchor,
                                  BandReward((0.3, 0.7), -0.5, r_lemma))


def test_the_teacher_is_shown_the_edited_program_and_trains_on_its_description_alone(micro_model_dir):
    from selfplay_core.engines.hf import HFEngine

    engine = HFEngine(str(micro_model_dir), batch_size=8)
    ctx = RunContext(load_config(None, ["engine.max_new_tokens_teacher=60"]), engine=engine)
    ctx.rng.seed(5)
    one_deletion = "def f(x):\n    x = 1\n    return x\n"
    props = lemma_round(per_anchor=2, anchors=[anchor(), anchor(one_deletion, "g2")]).propose(ctx)
    # two of the three deletions of the first goalpost, the only one of the second
    edits = {0: statement_deletions(THREE_STEPS), 1: ["def f(x):\n    return x\n"]}
    assert [p.anchor.goalpost_id for p in props] == ["g1", "g1", "g2"]
    firsts = [p.prefix for p in props[:2]]
    assert len(set(firsts)) == 2 and all(f in [forced_program(e) for e in edits[0]] for f in firsts)
    assert props[2].prefix == "### Solution\ndef f(x):\n    return x\n### Task\n"
    # the forced program spends the teacher's output budget: prompt + proposal fit where a free
    # lemma's would
    forced = max(len(engine.tokenizer(p.prefix, add_special_tokens=False)["input_ids"]) for p in props)
    assert forced > 20 and all(len(p.completion.token_ids) <= 60 - forced for p in props)
    for p in props:
        assert p.axis == "f" and p.direction == "easier"
        assert p.prompt.endswith("### Variant: easier, axis f\n" + p.prefix)
        assert p.text == p.prefix + p.completion.text
        # the forced program is in the prompt tokens the rollout conditions on, not in the
        # completion tokens it trains on
        assert engine.tokenizer.decode(p.completion.prompt_token_ids) == p.prompt


def test_the_sandbox_runs_the_edited_program_as_the_reference(executor):
    cfg = load_config(None, ["teacher.min_inputs=2"])
    ctx = RunContext(cfg, executor=executor)
    edited = "def f(x):\n    x = x - 5\n    x = x * 4\n    return x\n"   # `x = x % 7` deleted
    written = "Given a number, subtract 5, then multiply by 4.\n### Inputs\n10\n3\n0\n### End\n"
    bad = "### Inputs\n1\n2\n### End\n"        # no question written: the prefix opened the section
    props = [Proposal("lemma", anchor(), "f", "easier", "", Completion(text), id=f"p{i}",
                      prefix=forced_program(edited), extra={"usable_edits": 3})
             for i, text in enumerate((written, bad))]
    log = IterationLog()
    lemma_round().validate(ctx, props, log)
    good, empty = props
    assert good.accepted and good.parsed.code == edited
    assert good.parsed.question == "Given a number, subtract 5, then multiply by 4."
    assert [tc.expected for tc in good.problem.tests] == [20, -8, -20]   # (10-5)*4, (3-5)*4, (0-5)*4
    assert empty.rejection == "parse_empty_question"
    assert log.metrics["teacher/lemma/acceptance"] == 0.5
    assert log.metrics["teacher/lemma/editable_anchors"] == 1.0
    assert log.metrics["teacher/lemma/usable_edits"] == 3.0


def test_gasp_edit_takes_the_edited_lemma_round_and_refuses_what_it_cannot_combine():
    cfg = load_config(EDIT)
    assert cfg.method.name == "gasp-edit" and not cfg.method.edit_screen
    ctx = RunContext(cfg)
    ctx.goalposts = [Problem("g1", "call", [], entry_point="f", prompt="q", metadata={"reference": THREE_STEPS})]
    rounds = list(GASPEdit(cfg.method).rounds(ctx, []))
    assert [type(r).__name__ for r in rounds] == ["StatementDeletionRound"]
    assert rounds[0].per_anchor == cfg.method.proposals_per_anchor and not rounds[0].screen
    assert list(GASPEdit(load_config(EDIT, ["method.edit_screen=true"]).method).rounds(ctx, []))[0].screen
    for other, says in (("method.one_step=medium", "method.one_step has no lemma round"),
                        ("method.judge={name: code, power: 4}", "drop the judge"),
                        ("method.judge={name: guide, gate: 0.5}", "drop the judge")):
        with pytest.raises(Exception, match=f"method gasp-edit .*{says}"):
            load_config(EDIT, [other])
    # it reads the goalposts' programs: the privileged ablation only
    with pytest.raises(Exception, match="method gasp-edit reads each goalpost's reference program"):
        load_config(EDIT, ["method.privileged_sighted_teacher=false"])
    # the screen is gasp-edit's: GASP names where it went
    with pytest.raises(Exception, match="method.edit_screen: no longer a key; write method.edit_screen of "
                                        "method.name: gasp-edit"):
        load_config(None, ["method.edit_screen=true"])


def test_goalposts_without_a_program_to_edit_stop_the_run_before_it_starts():
    cfg = load_config(EDIT)
    ctx = RunContext(cfg)
    ctx.goalposts = [Problem("lcb/1", "call", [], entry_point="f", metadata={"reference": "def f(x):\n    return x\n"}),
                     Problem("lcb/2", "call", [], entry_point="f")]
    with pytest.raises(ConfigError, match=r"none of the 2 goalposts \(e.g. lcb/1\)"):
        GASPEdit(cfg.method).setup(ctx)
    ctx.goalposts.append(Problem("lcb/3", "call", [], entry_point="f", metadata={"reference": THREE_STEPS}))
    GASPEdit(cfg.method).setup(ctx)   # one goalpost can be edited: the run starts


@pytest.mark.slow
def test_one_iteration_on_the_committed_model(tmp_path):
    """Every lemma's program is a deletion of its goalpost's reference, every lift is the
    teacher's own, and the teacher's lemma rollouts condition on the program it did not write."""
    from selfplay_core import stages as S
    from selfplay_core.loop.context import build_context
    from selfplay_core.loop.driver import direct
    from selfplay_core.methods import method_for

    cfg = load_config(EDIT, ["iterations=1",
                             "method.goalposts_per_iteration=4", "eval.max_problems=8", "eval.n=2", "eval.ks=[1, 2]",
                             "engine.max_new_tokens_teacher=160", "sandbox.workers=2"])
    method = method_for(cfg.method)
    ctx = build_context(cfg, tmp_path)
    try:
        method.setup(ctx)
        log = IterationLog()
        done, _ = method.run_iteration(ctx, log, direct)
        refs = {g.id: g.metadata["reference"] for g in ctx.goalposts}
        lemmas = [p for p in done if p.kind == "lemma"]
        assert len(lemmas) == 4 * cfg.method.proposals_per_anchor
        for p in lemmas:
            assert p.prefix and p.prompt.endswith(p.prefix)
            assert p.prefix[len("### Solution\n"):-len("### Task\n")] in statement_deletions(refs[p.anchor.goalpost_id])
            if p.accepted:
                assert p.parsed.code in statement_deletions(refs[p.anchor.goalpost_id])
        assert all(not p.prefix for p in done if p.kind == "lift")
        rolls = S.rollouts(ctx, done, [])
        lemma_rolls = [r for r in rolls if r.meta["kind"] == "lemma"]
        assert lemma_rolls and all("### Solution" in ctx.tokenizer.decode(r.prompt_ids) for r in lemma_rolls)
        assert "teacher/lemma/reward" in log.metrics and "teacher/lemma/editable_anchors" in log.metrics
    finally:
        ctx.close()


# y is needed by the return; x * 1 changes nothing; x * 2 is a real step
SCREEN_ME = "def f(x):\n    y = x + 1\n    x = x * 2\n    x = x * 1\n    return x + y\n"
CRASHES = "def f(x):\n    x = x * 2\n    x = x * 1\n    return x + y\n"
STEP_DROPPED = "def f(x):\n    y = x + 1\n    x = x * 1\n    return x + y\n"      # 2x + 1 against 3x + 1
SAME_FUNCTION = "def f(x):\n    y = x + 1\n    x = x * 2\n    return x + y\n"


def goalpost_problem():
    from selfplay_core.problems import TestCase

    return Problem("g1", "call", [TestCase(args=[1], expected=4), TestCase(args=[2], expected=7)],
                   entry_point="f", prompt="q", metadata={"reference": SCREEN_ME})


def test_the_screen_keeps_deletions_that_run_and_change_the_function(executor):
    from selfplay_core.methods.edited_lemmas import screened_edits

    assert statement_deletions(SCREEN_ME) == [CRASHES, STEP_DROPPED, SAME_FUNCTION]
    ctx = RunContext(load_config(EDIT, ["method.edit_screen=true"]), executor=executor)
    ctx.goalposts = [goalpost_problem()]
    assert screened_edits(ctx, [anchor(SCREEN_ME)]) == {"g1": [STEP_DROPPED]}


def test_the_screen_draws_deletions_not_yet_in_the_buffer_first():
    from selfplay_core.buffers import BufferItem

    ctx = RunContext(load_config(None))
    ctx.rng.seed(1)
    edits = statement_deletions(THREE_STEPS)
    ctx.buffers.add(BufferItem("old", "lemma", "a question", edits[0], goalpost_id="g1"))
    ctx.buffers.add(BufferItem("other", "lemma", "another question", edits[1], goalpost_id="g2"))
    rnd = StatementDeletionRound("lemma", [anchor()], "easier", 2, BandReward((0.3, 0.7), -0.5, r_lemma), screen=True)
    for _ in range(5):
        assert sorted(rnd.draw(ctx, anchor(), edits)) == sorted(edits[1:])   # g2's item is no repeat for g1
    rnd.per_anchor = 3
    assert sorted(rnd.draw(ctx, anchor(), edits)) == sorted(edits)
