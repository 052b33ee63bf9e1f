"""The toy world's exact Guide: the judgments `roles.guide` asks for, computed from the task a
proposal's templated question denotes. A diagnostic (Guide accuracy against it is logged) and the
source of the bootstrap's Guide examples; never a reward.

* relevance (0-5): primitives the proposal shares with the target (as a multiset, constants
  ignored), capped at 5;
* redundant steps: steps whose removal leaves the outputs unchanged on fixed probe inputs;
  redundancy (0/1): any such step;
* complexity (0-4): depth - 1 plus the redundant steps, capped at 4 (depth 1 -> 0, depth 4 -> 3);
* fidelity (0/1): the question's program behaves like the proposal's code on probe inputs.

A question that is not a toy-world description gets (relevance 0, redundancy 1, complexity 4,
fidelity 0): nothing in it can be checked, and SGS gives it no guide reward.

`parse_program` reads a templated program back into its task, so fidelity of generated code is
decided here in-process by running *our own* rendering of the parsed task (never the text).
"""

from __future__ import annotations

import functools
import random
import re
from collections import Counter

from selfplay_core.roles.guide import GuideScores
from selfplay_core.toyworld.fidelity import parse_description
from selfplay_core.toyworld.primitives import PRIMITIVES
from selfplay_core.toyworld.tasks import (IN_REPS, OUT_REPS, SIGNATURE, Task, TaskError, _outputs)

UNPARSED = GuideScores(relevance=0, redundancy=1, complexity=4, fidelity=0)
_PROBE_SEED = 4321


def _line_regex(code: str) -> re.Pattern:
    return re.compile("^" + re.escape(code).replace(re.escape("{c}"), r"(\w+)") + "$")


_LINES = [(name, _line_regex(p.code)) for name, p in PRIMITIVES.items()]
_IN_ADAPTERS = {r.adapter: name for name, r in IN_REPS.items() if r.adapter}
_OUT_ADAPTERS = {r.adapter: name for name, r in OUT_REPS.items() if r.adapter}


def _parse_line(line: str, t: str):
    for name, rx in _LINES:
        p = PRIMITIVES[name]
        if p.in_type != t:
            continue
        m = rx.match(line)
        if not m:
            continue
        if not p.has_const:
            return (name, None)
        for c in p.consts:
            if str(c) == m.group(1):
                return (name, c)
    return None


def parse_program(code: str, in_rep: str | None = None) -> Task | None:
    """The task whose rendered program `code` is (up to indentation), else None. Some lines read
    the same for several input types (`x = x[::-1]` reverses a list or a string): without an
    input adapter the type is `in_rep`'s when given, else the first that parses."""
    lines = [ln.strip() for ln in code.strip().splitlines() if ln.strip()]
    if not lines or lines[0] != SIGNATURE or lines[-1] != "return x":
        return None
    body = lines[1:-1]
    adapter_in = None
    if body and body[0] in _IN_ADAPTERS:
        adapter_in = _IN_ADAPTERS[body.pop(0)]
    out_rep = None
    if body and body[-1] in _OUT_ADAPTERS:
        out_rep = _OUT_ADAPTERS[body.pop()]
    if not body:
        return None
    if adapter_in:
        bases = [IN_REPS[adapter_in].base]
    elif in_rep in IN_REPS and IN_REPS[in_rep].adapter is None:
        bases = [IN_REPS[in_rep].base]
    else:
        bases = ["ints", "str", "int"]
    for base in bases:
        steps, t = [], base
        for ln in body:
            s = _parse_line(ln, t)
            if s is None:
                break
            steps.append(s)
            t = PRIMITIVES[s[0]].out_type
        else:
            try:
                return Task(adapter_in or base, tuple(steps), out_rep or t)
            except TaskError:
                continue
    return None


@functools.lru_cache(maxsize=8192)
def _probe_inputs(in_rep: str, n: int = 12) -> list:
    rng = random.Random(f"{_PROBE_SEED}:{in_rep}")
    # the same sampler as the tasks': a few edge cases first, then ordinary values
    probe = Task(in_rep, (_any_step(IN_REPS[in_rep].base),), _native_out(IN_REPS[in_rep].base))
    return probe.sample_inputs(rng, n)


def _any_step(base: str):
    return {"ints": ("sort", None), "int": ("iabs", None), "str": ("upper", None)}[base]


def _native_out(base: str) -> str:
    return {"ints": "ints", "int": "int", "str": "str"}[base]


def redundant_steps(task: Task) -> int:
    """Steps whose removal (when the rest is still a valid task) changes no probe output."""
    inputs = _probe_inputs(task.in_rep)
    outs = _outputs(task, inputs)
    if outs is None or task.depth == 1:
        return 0
    n = 0
    for i in range(task.depth):
        try:
            shorter = Task(task.in_rep, task.steps[:i] + task.steps[i + 1:], task.out_rep)
        except TaskError:
            continue
        if _outputs(shorter, inputs) == outs:
            n += 1
    return n


def same_behaviour(a: Task, b: Task) -> bool:
    """Our renderings of two parsed tasks agree on probe inputs (both take the same input)."""
    if a.in_rep != b.in_rep:
        return False
    inputs = _probe_inputs(a.in_rep)
    oa = _outputs(a, inputs)
    return oa is not None and oa == _outputs(b, inputs)


def relevance(target: Task, proposal: Task) -> int:
    shared = Counter(n for n, _ in target.steps) & Counter(n for n, _ in proposal.steps)
    return min(5, sum(shared.values()))


def judge(target: Task, question: str, code: str | None = None,
          faithful: bool | None = None) -> GuideScores:
    """The exact judgments of a proposal (question + code) for `target`. Fidelity comes from
    `faithful` when given (e.g. the executor's `proposal_fidelity`), else from the parsed code;
    None when the code is not a templated program and no verdict was given."""
    task = parse_description(question)
    if task is None:
        return UNPARSED
    red = redundant_steps(task)
    if faithful is None and code is not None:
        parsed = parse_program(code, task.in_rep)
        faithful = None if parsed is None else same_behaviour(task, parsed)
    return GuideScores(relevance=relevance(target, task), redundancy=int(red > 0),
                       complexity=min(4, task.depth - 1 + red),
                       fidelity=None if faithful is None else int(faithful))


def oracle_judgment(target_question: str, question: str, code: str | None,
                    faithful: bool | None = None) -> GuideScores | None:
    """`judge` for a target given as its question text (the world's goalpost prompt); None when
    the target is not a toy-world description (nothing to judge against)."""
    target = parse_description(target_question)
    return None if target is None else judge(target, question, code, faithful)
