import random
import re

import pytest

from selfplay_core.roles.guide import KEYS, GuideScores, parse_guide
from selfplay_core.roles.student import StudentAnswer, parse_student
from selfplay_core.roles.teacher import TeacherProposal, parse_teacher
from selfplay_core.toyworld.corpus import CorpusSettings, build_corpus, noisy_program
from selfplay_core.toyworld.fidelity import parse_description, proposal_fidelity
from selfplay_core.toyworld.tasks import SIGNATURE, sample_task


def _split(text):
    head, _, rest = text.partition("### Solution\ndef f(x):\n")
    return head, rest


def test_corpus_is_deterministic():
    s = CorpusSettings(n_examples=300)
    assert build_corpus(s, 3) == build_corpus(s, 3)
    assert build_corpus(s, 3) != build_corpus(s, 4)


def test_corpus_mix_and_formats(world):
    texts = build_corpus(CorpusSettings(n_examples=600), 0, world.exclusion())
    teacher = [t for t in texts if "### Variant:" in t]
    guide = [t for t in texts if "### Review" in t]
    student = [t for t in texts if "### Variant:" not in t and "### Review" not in t]
    # 27 % teacher, 9 % Guide: binomial sd over 600 draws ~1.8 and ~1.2 points
    assert 0.21 < len(teacher) / len(texts) < 0.33
    assert 0.05 < len(guide) / len(texts) < 0.13
    for t in student:
        prompt, completion = t.split("### Solution\n" + SIGNATURE + "\n")
        assert isinstance(parse_student(completion, SIGNATURE, "f"), StudentAnswer)
    for t in teacher:
        prompt, _, output = t.partition("\n### Variant: ")
        output = output.split("\n", 1)[1]
        assert isinstance(parse_teacher(output), TeacherProposal), output
    for t in guide:
        assert isinstance(parse_guide(t.split("### Review\n", 1)[1], require=KEYS), GuideScores), t


def test_teacher_targets_are_faithful(world, executor):
    """The teacher's example programs do what their questions say (teacher_bug_rate 0), so
    the bootstrap never teaches it to write unfaithful proposals."""
    texts = build_corpus(CorpusSettings(n_examples=400), 1, world.exclusion())
    props = [parse_teacher(t.partition("\n### Variant: ")[2].split("\n", 1)[1])
             for t in texts if "### Variant:" in t]
    fid = proposal_fidelity(executor, [(p.question, p.code, p.inputs) for p in props])
    assert len(fid) > 80 and all(f.faithful for f in fid)


def test_guide_labels_match_the_oracle_and_cover_each_judgment(world, executor):
    """Each Guide example's labels are the oracle's, with fidelity checked independently by
    running the example's code against its question's program in the sandbox."""
    texts = [t for t in build_corpus(CorpusSettings(n_examples=1500), 2, world.exclusion())
             if "### Review" in t]
    rows = []
    for t in texts:
        head, review = t.split("### Review\n", 1)
        question = head.split("### Proposal\n", 1)[1].split("\n### Solution\n")[0]
        code = head.split("### Solution\n", 1)[1]
        rows.append((question, code, parse_guide(review, require=KEYS)))
    task_inputs = []
    for question, code, _ in rows:
        task = parse_description(question)
        task_inputs.append(task.sample_inputs(random.Random(0), 8))
    fid = proposal_fidelity(executor, [(q, c, [[v] for v in inp])
                                       for (q, c, _), inp in zip(rows, task_inputs)])
    agree = sum(f.faithful == bool(g.fidelity) for f, (_, _, g) in zip(fid, rows))
    assert agree / len(rows) > 0.97   # the sandbox's 8 random inputs vs the oracle's 12 probes
    for key, values in (("fidelity", {0, 1}), ("redundancy", {0, 1}),
                        ("relevance", {0, 1, 2, 3}), ("complexity", {0, 1, 2, 3, 4})):
        seen = {getattr(g, key) for _, _, g in rows}
        assert values <= seen, (key, seen)
    share = sum(g.fidelity for _, _, g in rows) / len(rows)
    assert 0.35 < share < 0.65


def test_corpus_never_contains_held_out_tasks(world):
    held = world.exclusion()
    texts = build_corpus(CorpusSettings(n_examples=600), 0, held)
    for text in texts:
        for line in text.splitlines():
            if line.startswith("Given "):
                task = parse_description(line)
                assert task is not None and not held.blocks(task), line


def test_bug_rate_controls_program_noise():
    rng = random.Random(0)
    tasks = [sample_task(rng, 2) for _ in range(200)]
    assert all(noisy_program(t, rng, 0.0) == t.program() for t in tasks)
    wrong = sum(noisy_program(t, rng, 0.3) != t.program() for t in tasks) / len(tasks)
    assert 0.3 < wrong < 0.65   # 1 - 0.7**2 = 0.51, less the few steps that cannot mutate


def _lines(code):
    return [ln for ln in code.splitlines() if ln.strip()]


def test_edit_description_examples_describe_a_statement_deletion_of_their_source(world, executor):
    """With every teacher example an edit description: the prompt is the edited-lemma round's
    (easier, axis f), the program written first is the source's program with exactly one of its
    lines gone (checked line by line here, not with the code that made it), and the question
    describes that program (run against it in the sandbox)."""
    s = CorpusSettings(n_examples=300, teacher_edit_share=1.0)
    texts = [t for t in build_corpus(s, 5, world.exclusion()) if "### Variant:" in t]
    assert len(texts) > 60
    items, positions = [], set()
    for t in texts:
        prompt, _, rest = t.partition("\n### Variant: ")
        head, output = rest.split("\n", 1)
        assert head == "easier, axis f"
        assert output.startswith("### Solution\n"), output     # program first, as the round forces it
        source = _lines(prompt.split("### Solution\n", 1)[1])
        p = parse_teacher(output)
        program = _lines(p.code)
        assert len(program) == len(source) - 1
        gone = [i for i in range(len(source)) if source[:i] + source[i + 1:] == program]
        assert gone and 0 < gone[0] < len(source) - 1          # neither the signature nor the return
        positions.add(gone[0])
        items.append((p.question, p.code, p.inputs))
    fid = proposal_fidelity(executor, items)
    assert all(f.faithful for f in fid)
    assert {1, 2, 3} <= positions      # deletions anywhere in the body, not one fixed line


def test_edit_share_zero_is_the_corpus_without_the_option():
    base = build_corpus(CorpusSettings(n_examples=300), 7)
    assert build_corpus(CorpusSettings(n_examples=300, teacher_edit_share=0.0), 7) == base
    mixed = build_corpus(CorpusSettings(n_examples=300, teacher_edit_share=0.5), 7)
    assert mixed != base and len(mixed) == len(base)


@pytest.mark.parametrize("kw, words", [
    (dict(teacher_edit_share=1.5), "teacher_edit_share must be in [0, 1]"),
    (dict(teacher_edit_share=0.5, teacher_source_depths=((1, 1.0),)), "depth >= 2"),
])
def test_edit_share_settings_are_checked(kw, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        CorpusSettings(**kw)
