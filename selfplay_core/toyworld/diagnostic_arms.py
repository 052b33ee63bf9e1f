"""Diagnostic arms of the learning study (toy world only): what the loop does with a perfect
teacher, or with the real teacher's unfaithful proposals taken out of the student's batch.

They are *not methods*: nothing here is registered or selectable in a run config; the study
harness (`selfplay_core.study`) builds them. The oracle decides what is proposed (oracle
curriculum) or what the student trains on (oracle filter) — never a reward: the oracle
curriculum has no teacher rollouts at all, and the oracle filter leaves every teacher reward as
the method computed it.

* `OracleTeacher.propose` stands in for the teacher's generation: true one-step easier
  variants of a goalpost (lemmas) or true harder variants of a lemma (lifts), written in the
  teacher's output format, so validation, the eval-contamination gate, pass-rate estimation
  and band scoring are exactly the real teacher's. Exact goalposts and evaluation tasks (and
  held-out algorithms) are never proposed.
* `faithful_only(student_tasks, proposals)`: the oracle filter on the student batch.
"""

from __future__ import annotations

import random
from typing import Sequence

from selfplay_core.engines.base import Completion
from selfplay_core.roles.teacher import teacher_completion, teacher_prompt
from selfplay_core.toyworld.corpus import Exclusion
from selfplay_core.toyworld.fidelity import parse_description
from selfplay_core.toyworld.oracle import easier_variants, harder_variants
from selfplay_core.toyworld.tasks import Task


class OracleTeacher:
    """True variants in the teacher's format. `blocked`: tasks never to propose (goalposts and
    the evaluation split); `inputs`: test inputs per proposal."""

    def __init__(self, blocked: Sequence[Task], seed: int, inputs: int = 8):
        self.exclusion = Exclusion()
        for t in blocked:
            self.exclusion.add(t)
        self.rng = random.Random(f"oracle-teacher:{seed}")
        self.inputs = inputs

    def variants(self, task: Task, direction: str, n: int, axes) -> list[tuple[str, Task]]:
        if direction == "easier":
            pool = [(a, v) for a, v in easier_variants(task, axes) if not self.exclusion.blocks(v)]
            self.rng.shuffle(pool)
            return pool[:n]
        out = harder_variants(task, n * 3, self.rng, axes)
        return [(a, v) for a, v in out if not self.exclusion.blocks(v)][:n]

    def completion(self, task: Task) -> Completion:
        inputs = task.sample_inputs(self.rng, self.inputs)
        self.rng.shuffle(inputs)
        text = teacher_completion(task.description(), task.program(), inputs)
        # No token ids: the learner gets no teacher rollout from an oracle proposal.
        return Completion(text=text, token_ids=[], logprobs=None, finish_reason="stop")

    def propose(self, anchors, direction: str, n: int, axes) -> list[tuple[object, str, str, Completion]]:
        """(anchor, axis, prompt, completion) for up to n true variants per anchor. An anchor
        whose question is not a toy description (never the case for goalposts and accepted
        lemmas, whose text the gate checked) gets none."""
        out = []
        for a in anchors:
            task = parse_description(a.question)
            if task is None:
                continue
            for axis, v in self.variants(task, direction, n, axes):
                out.append((a, axis, teacher_prompt(a.question, a.code, axis, direction),
                            self.completion(v)))
        return out


def faithful_only(student: list, proposals: Sequence) -> list:
    """The oracle filter: drop the student tasks made from unfaithful proposals (real tasks and
    replayed buffer items, which carry no verdict, stay)."""
    unfaithful = {p.problem.id for p in proposals if p.problem is not None and p.faithful is False}
    return [(kind, r) for kind, r in student if r.problem.id not in unfaithful]
