"""Proposal fidelity: does a question's text describe its program?

Toy-world descriptions are templated, so a description can be parsed back into a task and the
task's program run next to the proposed one on the proposal's inputs. Real code has no such
oracle, so this is a *diagnostic* for the self-play loop's logs (share of accepted proposals that
are faithful), never a training signal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from selfplay_core.problems import Problem, TestCase
from selfplay_core.toyworld.primitives import PRIMITIVES
from selfplay_core.toyworld.tasks import IN_REPS, OUT_REPS, Task, TaskError

_JOIN = ", then "


def _phrase_regex(text: str) -> re.Pattern:
    return re.compile("^" + re.escape(text).replace(re.escape("{c}"), r"(\w+)") + "$")


_PHRASES = {name: _phrase_regex(p.text) for name, p in PRIMITIVES.items()}


def _parse_step(phrase: str, t: str):
    for name, rx in _PHRASES.items():
        p = PRIMITIVES[name]
        if p.in_type != t:
            continue
        m = rx.match(phrase)
        if not m:
            continue
        if not p.has_const:
            return (name, None)
        raw = m.group(1)
        for c in p.consts:
            if str(c) == raw:
                return (name, c)
    return None


def parse_description(text: str) -> Task | None:
    """The task a templated description denotes, or None if it is not one."""
    text = " ".join(text.split())
    for in_name in sorted(IN_REPS, key=lambda r: -len(IN_REPS[r].text)):
        prefix = IN_REPS[in_name].text + ", "
        if not text.startswith(prefix):
            continue
        rest = text[len(prefix):]
        end = rest.find(".")
        if end == -1:
            return None
        phrases, tail = rest[:end].split(_JOIN), rest[end + 1:].strip()
        steps, t = [], IN_REPS[in_name].base
        for ph in phrases:
            s = _parse_step(ph, t)
            if s is None:
                return None
            steps.append(s)
            t = PRIMITIVES[s[0]].out_type
        for out_name, rep in OUT_REPS.items():
            if rep.base == t and rep.text == tail:
                try:
                    return Task(in_name, tuple(steps), out_name)
                except TaskError:
                    return None
        return None
    return None


@dataclass(frozen=True)
class Fidelity:
    parsed: bool     # the description is a well-formed toy-world description
    faithful: bool   # ... and its program behaves like the proposed code on the inputs
    reason: str = ""


def proposal_fidelity(executor, items: Sequence[tuple[str, str, list]]) -> list[Fidelity]:
    """For (question, code, inputs) triples — inputs as argument lists — in one executor batch:
    is the code's behaviour on the inputs the one the question describes?"""
    out: list[Fidelity | None] = [None] * len(items)
    jobs = []
    for k, (question, code, inputs) in enumerate(items):
        task = parse_description(question)
        if task is None:
            out[k] = Fidelity(False, False, "unparsed_description")
            continue
        if not inputs:
            out[k] = Fidelity(True, False, "no_inputs")
            continue
        prob = Problem(id=f"fidelity/{k}", kind="call", entry_point="f",
                       tests=[TestCase(args=list(a), has_expected=False) for a in inputs],
                       time_limit_s=1.0, memory_limit_mb=256)
        jobs.append((k, prob, task.program(), code))
    runs = executor.run([(p, ref) for _, p, ref, _ in jobs] + [(p, code) for _, p, _, code in jobs])
    refs, props = runs[: len(jobs)], runs[len(jobs):]
    for (k, *_), ref, prop in zip(jobs, refs, props):
        if not ref.ok:
            out[k] = Fidelity(True, False, "inputs_do_not_fit_description")
        elif not prop.ok:
            out[k] = Fidelity(True, False, "code_error")
        elif ref.outputs != prop.outputs:
            out[k] = Fidelity(True, False, "behaviour_differs")
        else:
            out[k] = Fidelity(True, True)
    return out  # type: ignore[return-value]


def true_outputs(executor, items: Sequence[tuple[str, list]]) -> list[list | None]:
    """For (question, inputs) pairs — inputs as argument lists — in one executor batch: the
    outputs of the program the question describes, or None when the question is not a toy-world
    description or that program fails on one of the inputs (there is no truth to compare to).
    The truth behind a task proposed without a program (R-Zero); a diagnostic, never a reward."""
    out: list[list | None] = [None] * len(items)
    jobs = []
    for k, (question, inputs) in enumerate(items):
        task = parse_description(question)
        if task is None or not inputs:
            continue
        prob = Problem(id=f"truth/{k}", kind="call", entry_point="f",
                       tests=[TestCase(args=list(a), has_expected=False) for a in inputs],
                       time_limit_s=1.0, memory_limit_mb=256)
        jobs.append((k, prob, task.program()))
    for (k, _, _), r in zip(jobs, executor.run([(p, code) for _, p, code in jobs]) if jobs else []):
        if r.ok:
            out[k] = list(r.outputs)
    return out
