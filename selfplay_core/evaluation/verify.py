"""Executor verdicts for programs extracted from samples: the verification step that the
benchmark runner (`selfplay evaluate`) and the loop's solve path (`selfplay_core.solve`) share.

A harness error is the sandbox's fault, never the model's; with `retry_harness_errors` such a
sample runs once more (what the runner does before leaving a sample that fails twice out of n).
"""

from __future__ import annotations

from typing import Callable, Sequence

from selfplay_core.problems import Problem, Sample, SampleVerdict, Verdict


def verify_programs(executor, items: Sequence[tuple[Problem, str | int, str]], *,
                    early_exit: bool = True, progress: Callable[[int], None] | None = None,
                    retry_harness_errors: bool = False) -> list[SampleVerdict]:
    """One verdict per (problem, sample id, program), in order, from one executor batch."""
    pairs = [(p, Sample(p.id, sid, code)) for p, sid, code in items]
    verdicts = executor.verify(pairs, early_exit=early_exit, progress=progress)
    again = [i for i, v in enumerate(verdicts) if v.verdict is Verdict.harness_error] \
        if retry_harness_errors else []
    if again:
        redo = executor.verify([pairs[i] for i in again], early_exit=early_exit)
        for i, v in zip(again, redo):
            verdicts[i] = v
    return verdicts
