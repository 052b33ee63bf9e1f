"""The pretraining corpus: student examples (task -> code) and teacher examples (task -> variant).

Two lessons from the feasibility runs are built in:
* A per-line bug rate in the student programs (default 30 % per algorithm line): a model trained
  only on clean code is confidently wrong (pass@8 ~ pass@1) and RL gets no signal; with noise the
  right program is the most likely one but not the only one.
* Teacher examples include depth 2 -> 3 (and a few 3 -> 4) "harder" pairs; without them the
  teacher never proposes beyond the student's depth.

Held-out tasks (eval split, goalpost pool) never appear, on either side of a pair: exact tasks are
excluded, and for depth >= 2 every task that shares a held-out algorithm (whatever its
representation) too, so io variants cannot leak a held-out algorithm.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from selfplay_core.roles.student import student_completion, student_prompt
from selfplay_core.roles.teacher import teacher_completion, teacher_prompt
from selfplay_core.toyworld.primitives import PRIMITIVES
from selfplay_core.toyworld.tasks import SIGNATURE, Task, sample_task
from selfplay_core.toyworld.variants import variant


@dataclass
class Exclusion:
    keys: set = field(default_factory=set)          # exact tasks
    algorithms: set = field(default_factory=set)    # algorithm keys of held-out depth >= 2 tasks

    def add(self, task: Task) -> None:
        self.keys.add(task.key)
        if task.depth >= 2:
            self.algorithms.add(task.algorithm_key)

    def blocks(self, task: Task) -> bool:
        return task.key in self.keys or task.algorithm_key in self.algorithms


def mutate_step(step, rng: random.Random):
    """A plausible wrong line: another constant, or a primitive of the same type signature."""
    name, c = step
    p = PRIMITIVES[name]
    if p.has_const and rng.random() < 0.5:
        others = [k for k in p.consts if k != c]
        return (name, rng.choice(others))
    sib = [q for q in PRIMITIVES.values()
           if q.in_type == p.in_type and q.out_type == p.out_type and q.name != name]
    if not sib:  # e.g. `digits`: nothing of the same shape to confuse it with
        return step
    q = rng.choice(sib)
    return (q.name, rng.choice(q.consts) if q.has_const else None)


def noisy_program(task: Task, rng: random.Random, bug_rate: float) -> str:
    steps = [mutate_step(s, rng) if rng.random() < bug_rate else s for s in task.steps]
    return task.program(steps)


def program_body(program: str) -> str:
    """The lines after the signature (the student's completion)."""
    return program.split("\n", 1)[1]


def student_example(task: Task, rng: random.Random, bug_rate: float) -> str:
    body = program_body(noisy_program(task, rng, bug_rate))
    return student_prompt(task.description(), SIGNATURE) + student_completion(body)


def teacher_example(src: Task, dst: Task, axis: str, direction: str, rng: random.Random,
                    bug_rate: float, n_inputs: int) -> str:
    inputs = dst.sample_inputs(rng, n_inputs)
    rng.shuffle(inputs)
    return (teacher_prompt(src.description(), src.program(), axis, direction)
            + teacher_completion(dst.description(), noisy_program(dst, rng, bug_rate), inputs))


@dataclass(frozen=True)
class CorpusSettings:
    n_examples: int = 40000
    # Shares of the corpus; the rest of 1.0 goes to teacher variant pairs.
    student_depth_shares: tuple = ((1, 0.70), (2, 0.085), (3, 0.015))
    # Depth of the task shown to the teacher in variant pairs.
    teacher_source_depths: tuple = ((1, 0.45), (2, 0.45), (3, 0.10))
    bug_rate: float = 0.3
    teacher_bug_rate: float = 0.1
    teacher_inputs: int = 4

    def __post_init__(self):
        s = sum(w for _, w in self.student_depth_shares)
        if not 0 < s <= 1:
            raise ValueError("student_depth_shares must sum to a value in (0, 1]")
        if not 0 <= self.bug_rate <= 1 or not 0 <= self.teacher_bug_rate <= 1:
            raise ValueError("bug rates must be in [0, 1]")
        if self.n_examples < 1 or self.teacher_inputs < 1:
            raise ValueError("n_examples and teacher_inputs must be >= 1")


def _draw_task(rng, depth, exclusion: Exclusion) -> Task:
    while True:
        t = sample_task(rng, depth)
        if not exclusion.blocks(t):
            return t


def _draw_pair(rng, s: CorpusSettings, exclusion: Exclusion):
    depths, weights = zip(*s.teacher_source_depths)
    while True:
        src = _draw_task(rng, rng.choices(depths, weights)[0], exclusion)
        axis = rng.choice(("f", "io"))
        direction = rng.choice(("easier", "harder"))
        dst = variant(src, axis, direction, rng)
        if dst is not None and not exclusion.blocks(dst):
            return src, dst, axis, direction


def build_corpus(settings: CorpusSettings, seed: int, exclusion: Exclusion | None = None) -> list[str]:
    """Deterministic for (settings, seed, exclusion): the same texts in the same order."""
    exclusion = exclusion or Exclusion()
    rng = random.Random(f"toyworld-corpus:{seed}")
    kinds = [d for d, _ in settings.student_depth_shares] + ["teacher"]
    shares = [w for _, w in settings.student_depth_shares]
    shares.append(max(0.0, 1.0 - sum(shares)))
    texts = []
    for _ in range(settings.n_examples):
        kind = rng.choices(kinds, shares)[0]
        if kind == "teacher":
            src, dst, axis, direction = _draw_pair(rng, settings, exclusion)
            texts.append(teacher_example(src, dst, axis, direction, rng, settings.teacher_bug_rate,
                                         settings.teacher_inputs))
        else:
            texts.append(student_example(_draw_task(rng, kind, exclusion), rng, settings.bug_rate))
    return texts
