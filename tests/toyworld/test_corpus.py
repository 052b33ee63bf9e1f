import random

from selfplay_core.roles.student import StudentAnswer, parse_student
from selfplay_core.roles.teacher import TeacherProposal, parse_teacher
from selfplay_core.toyworld.corpus import CorpusSettings, build_corpus, noisy_program
from selfplay_core.toyworld.fidelity import parse_description
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
    student = [t for t in texts if "### Variant:" not in t]
    assert 0.12 < len(teacher) / len(texts) < 0.28
    for t in student:
        prompt, completion = t.split("### Solution\n" + SIGNATURE + "\n")
        assert isinstance(parse_student(completion, SIGNATURE, "f"), StudentAnswer)
    for t in teacher:
        prompt, _, output = t.partition("\n### Variant: ")
        output = output.split("\n", 1)[1]
        assert isinstance(parse_teacher(output), TeacherProposal), output


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
