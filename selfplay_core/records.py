"""What flows between the stages of an iteration."""

from __future__ import annotations

from dataclasses import dataclass, field

from selfplay_core.engines.base import Completion
from selfplay_core.problems import Problem


@dataclass
class Anchor:
    """What a teacher prompt is built from: a goalpost, a lemma (for a lift), a buffer item."""

    id: str
    question: str
    code: str
    goalpost_id: str | None = None
    axis: str | None = None


@dataclass
class Proposal:
    """One teacher rollout and everything learned about it along the iteration."""

    kind: str                       # lemma | lift | medium | hard | azr
    anchor: Anchor
    axis: str
    direction: str
    prompt: str
    completion: Completion
    id: str = ""
    temperature: float = 1.0
    parsed: object = None           # TeacherProposal | Rejection
    problem: Problem | None = None  # set when valid: a task with executor-made expected outputs
    rejection: str | None = None
    pass_rate: float | None = None
    reward: float | None = None
    faithful: bool | None = None
    solve: object = None            # SolveResult of the student's samples
    # What a method records about the proposal beyond the above (JSON values): e.g. SGS's Guide
    # judgments and reward parts; logged with the proposal's sample row.
    extra: dict = field(default_factory=dict)
    # Text the proposer was made to write before its completion (forced at the end of `prompt`,
    # e.g. a program the executor edited): it is read with the completion, never trained on.
    prefix: str = ""

    @property
    def text(self) -> str:
        """The whole proposal as written: the forced prefix, then the sampled completion."""
        return self.prefix + self.completion.text

    @property
    def accepted(self) -> bool:
        return self.problem is not None


@dataclass
class IterationLog:
    metrics: dict = field(default_factory=dict)
    proposals: list[Proposal] = field(default_factory=list)
    student_rows: list[dict] = field(default_factory=list)

    def add(self, **kv) -> None:
        self.metrics.update(kv)
