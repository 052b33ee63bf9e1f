"""How well the tiny model plays its teacher and Guide roles, measured against the toy world's
oracle (diagnostics: `lab/toyworld_bootstrap.py` prints them, the loop logs Guide
accuracy; none of it is a reward).

Teacher, per kind of prompt (a goalpost made easier = GASP's lemma, a lemma made harder = its
lift): the share of prompts whose proposal parses, runs (valid), describes its code (faithful:
the executor runs the question's program next to the proposal's), and is a *true variant* —
faithful and exactly one step from the source in the asked direction.

Guide: exact-match accuracy of each judgment against `guide_oracle.judge`, on proposals the
oracle can judge; fidelity also as balanced accuracy (faithful and unfaithful proposals
weighted alike), since a Guide that always says "faithful" would look good on a faithful set.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Sequence

from selfplay_core.engines.base import SamplingParams
from selfplay_core.roles.common import Rejection
from selfplay_core.roles.guide import KEYS, STOP as GUIDE_STOP, GuideScores, guide_prompt, parse_guide
from selfplay_core.roles.teacher import STOP as TEACHER_STOP, parse_teacher, teacher_prompt
from selfplay_core.toyworld.fidelity import parse_description, proposal_fidelity
from selfplay_core.toyworld.guide_oracle import judge
from selfplay_core.toyworld.oracle import easier_variants
from selfplay_core.toyworld.tasks import Task


@dataclass
class TeacherQuality:
    kind: str
    prompts: int = 0
    parsed: int = 0
    valid: int = 0
    faithful: int = 0
    true_variant: int = 0
    depths: dict = field(default_factory=dict)   # depth of faithful proposals -> count

    def shares(self) -> dict:
        n = max(1, self.prompts)
        return {"prompts": self.prompts, "parsed": self.parsed / n, "valid": self.valid / n,
                "faithful": self.faithful / n, "faithful_of_valid": self.faithful / max(1, self.valid),
                "true_variant": self.true_variant / n, "depths": dict(sorted(self.depths.items()))}


def is_true_variant(source: Task, proposal: Task, direction: str) -> bool:
    if direction == "easier":
        return any(v == proposal for _, v in easier_variants(source))
    if direction == "harder":
        return any(v == source for _, v in easier_variants(proposal))
    return False


def teacher_quality(engine, executor, sources: Sequence[Task], direction: str, kind: str,
                    temperature: float, seed: int = 0, max_new_tokens: int = 192):
    """One proposal per source task (random axis); returns (TeacherQuality, proposals) where
    proposals are (source, parsed proposal, faithful, true variant) for the valid ones."""
    rng = random.Random(f"teacher-quality:{seed}:{kind}")
    prompts = [teacher_prompt(t.description(), t.program(), rng.choice(("f", "io")), direction)
               for t in sources]
    sp = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed,
                        stop=TEACHER_STOP)
    comps = [g[0] for g in engine.generate(prompts, 1, sp)]
    q = TeacherQuality(kind, prompts=len(prompts))
    out = _grade(q, executor, [parse_teacher(c.text) for c in comps], sources,
                 lambda src, task: is_true_variant(src, task, direction))
    return q, out


def _grade(q: TeacherQuality, executor, parsed: list, keys: Sequence, is_true) -> list:
    """Counts into `q` the parsed, valid (the executor's gate), faithful (the question describes
    the code on the proposal's inputs) and true proposals (`is_true(key, described task)`, asked
    of faithful ones); returns (key, proposal, faithful, true) for the valid ones."""
    from selfplay_core.proposals import validate_proposals

    checks = validate_proposals(executor, parsed)
    valid = [(key, v.proposal) for key, v in zip(keys, checks) if v.valid]
    q.parsed = sum(not isinstance(p, Rejection) for p in parsed)
    q.valid = len(valid)
    fid = proposal_fidelity(executor, [(p.question, p.code, p.inputs) for _, p in valid]) if valid else []
    out = []
    for (key, p), f in zip(valid, fid):
        true = False
        if f.faithful:
            q.faithful += 1
            task = parse_description(p.question)
            q.depths[task.depth] = q.depths.get(task.depth, 0) + 1
            true = bool(is_true(key, task))
            q.true_variant += true
        out.append((key, p, f.faithful, true))
    return out


def edit_description_quality(engine, executor, sources: Sequence[Task], temperature: float,
                             seed: int = 0, max_new_tokens: int = 192) -> TeacherQuality:
    """GASP's executor-edited lemma (method `gasp-edit`), one prompt per
    source: one of its statement deletions that is a toy task, forced as the loop forces it, and
    the teacher's question read against that program (`faithful`: the forced program does on the
    teacher's inputs what the question says; `true_variant`: faithful, and the question's task is
    the deletion's). The completion's budget is the loop's: `max_new_tokens` less the forced
    program's tokens."""
    from selfplay_core.program_edits import EDIT_AXIS, budget_after_forced, forced_program
    from selfplay_core.toyworld.corpus import edited_task_deletions

    rng = random.Random(f"edit-description:{seed}")
    plan = []
    for src in sources:
        cands = edited_task_deletions(src)
        if cands:
            code, task = rng.choice(cands)
            plan.append((src, forced_program(code), task))
    q = TeacherQuality("describe edit", prompts=len(plan))
    if not plan:
        return q
    budget = budget_after_forced(engine.tokenizer, [prefix for _, prefix, _ in plan], max_new_tokens)
    sp = SamplingParams(temperature=temperature, max_new_tokens=budget, seed=seed, stop=TEACHER_STOP)
    prompts = [teacher_prompt(s.description(), s.program(), EDIT_AXIS, "easier") + prefix
               for s, prefix, _ in plan]
    comps = [g[0] for g in engine.generate(prompts, 1, sp)]
    parsed = [parse_teacher(prefix + c.text) for (_, prefix, _), c in zip(plan, comps)]
    _grade(q, executor, parsed, [task for _, _, task in plan], lambda deleted, described: described == deleted)
    return q


def source_coverage(items) -> tuple[int, int, int]:
    """items: (source key, line similarity to the source, is a true lemma) per valid proposal.
    Returns (sources, sources with at least one true lemma, sources whose most similar proposal
    below similarity 1.0 — a copy is no lemma — is a true lemma; ties go to a true one, the
    most a similarity selector could do)."""
    by_source: dict = {}
    for key, sim, true in items:
        by_source.setdefault(key, []).append((sim, true))
    any_true = sum(any(t for _, t in props) for props in by_source.values())
    top_true = 0
    for props in by_source.values():
        below = [(s, t) for s, t in props if s < 1.0]
        if below and max(below)[1]:
            top_true += 1
    return len(by_source), any_true, top_true


@dataclass
class GuideAccuracy:
    items: int = 0
    parsed: int = 0
    correct: dict = field(default_factory=lambda: {k: 0 for k in KEYS})
    judged: dict = field(default_factory=lambda: {k: 0 for k in KEYS})
    fidelity_by_truth: dict = field(default_factory=lambda: {0: [0, 0], 1: [0, 0]})  # truth -> [right, n]

    def summary(self) -> dict:
        acc = {k: self.correct[k] / self.judged[k] for k in KEYS if self.judged[k]}
        rates = [r / n for r, n in self.fidelity_by_truth.values() if n]
        out = {"items": self.items, "parsed": self.parsed / max(1, self.items), "accuracy": acc}
        if rates:
            out["fidelity_balanced_accuracy"] = sum(rates) / len(rates)
        out["fidelity_items"] = {str(t): n for t, (_, n) in self.fidelity_by_truth.items()}
        return out


def guide_accuracy(engine, items: Sequence[tuple[Task, str, str, GuideScores]], seed: int = 0,
                   temperature: float = 0.0, max_new_tokens: int = 40) -> GuideAccuracy:
    """items: (target task, proposal question, proposal code, the oracle's judgments)."""
    prompts = [guide_prompt(t.description(), q, c) for t, q, c, _ in items]
    sp = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed, stop=GUIDE_STOP)
    comps = [g[0] for g in engine.generate(prompts, 1, sp)] if prompts else []
    acc = GuideAccuracy(items=len(items))
    for (_, _, _, truth), c in zip(items, comps):
        got = parse_guide(c.text, require=())
        if isinstance(got, Rejection):
            continue
        acc.parsed += 1
        for k in KEYS:
            want, have = getattr(truth, k), getattr(got, k)
            if want is None:
                continue
            acc.judged[k] += 1
            acc.correct[k] += int(have == want)
        if truth.fidelity is not None:
            row = acc.fidelity_by_truth[truth.fidelity]
            row[0] += int(got.fidelity == truth.fidelity)
            row[1] += 1
    return acc


def guide_items_from_proposals(proposals, targets: dict | None = None):
    """Guide items from teacher proposals (source, parsed proposal, faithful, true variant), as
    `teacher_quality` returns them: the target is the source task (a goalpost for a lemma),
    fidelity the executor's verdict."""
    items = []
    for src, p, faithful, _ in proposals:
        truth = judge(src, p.question, p.code, faithful=faithful)
        items.append((src, p.question, p.code, truth))
    return items
