"""Advantage estimators: pure functions from rewards (+ group keys) to per-sample advantages.

* Task-Relative REINFORCE++ (AZR): normalize within each (task kind, role) group, so a
  teacher's learnability reward and a student's pass/fail never share a baseline.
* GRPO: normalize within each prompt group (the n samples of one prompt).
* Task-Relative REINFORCE++ with a per-prompt baseline for the solver (`trr++_prompt`): each
  student sample's reward first has its own task's mean subtracted (the samples of one prompt),
  then TRR++ scales by the (task kind, role) spread. A task every sample solves (or none does)
  then teaches nothing, where plain TRR++ pushes all its samples up against the kind's mean —
  reinforcing answers the policy already gives, which narrows it (held-out pass@8 falls).
  Proposer rollouts keep plain TRR++ (a proposal prompt has one or two samples).
* Dr. GRPO: subtract the group mean only (no std division, which biases towards easy and
  hard prompts).
* REINFORCE½ (SGS): keep only correct rollouts on tasks the student solves at most half the
  time; their advantage is 1 (plain log-likelihood), the rest are dropped.
* SFT (STaR): advantage 1 for every rollout, i.e. the clipped policy-gradient step on rollouts
  scored by the current policy is a log-likelihood step (the method keeps only correct ones).

A group whose rewards are all equal carries no signal: its advantages are exactly 0.

`ESTIMATORS` names each as a function of the batch's `Scored` rollouts; a method's config picks
one (`method.advantage`), so the update stage never branches on a method or an estimator name.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence


def _groups(keys: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    idx: dict[Hashable, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        idx[k].append(i)
    return idx


def _normalize(rewards: Sequence[float], keys: Sequence[Hashable], *, scale: bool,
               eps: float) -> list[float]:
    if len(rewards) != len(keys):
        raise ValueError(f"{len(rewards)} rewards but {len(keys)} group keys")
    adv = [0.0] * len(rewards)
    for members in _groups(keys).values():
        vals = [float(rewards[i]) for i in members]
        mean = sum(vals) / len(vals)
        var = sum((v - mean) ** 2 for v in vals) / len(vals)
        std = math.sqrt(var)
        if std < 1e-12:
            continue  # no signal in this group
        for i, v in zip(members, vals):
            adv[i] = (v - mean) / (std + eps) if scale else v - mean
    return adv


def task_relative_reinforce_pp(rewards: Sequence[float], task_kinds: Sequence[str],
                               roles: Sequence[str], eps: float = 1e-6) -> list[float]:
    return _normalize(rewards, list(zip(task_kinds, roles)), scale=True, eps=eps)


def prompt_baseline_trr(rewards: Sequence[float], task_kinds: Sequence[str], roles: Sequence[str],
                        prompt_groups: Sequence[Hashable], centre: Sequence[bool],
                        eps: float = 1e-6) -> list[float]:
    """TRR++ after subtracting each prompt group's mean from the rewards marked `centre`."""
    n = len(rewards)
    if not (len(task_kinds) == len(roles) == len(prompt_groups) == len(centre) == n):
        raise ValueError("rewards, kinds, roles, prompt groups and centre flags differ in length")
    marked = [i for i in range(n) if centre[i]]
    centred = _normalize([rewards[i] for i in marked], [(roles[i], prompt_groups[i]) for i in marked],
                         scale=False, eps=0.0)
    vals = [float(r) for r in rewards]
    for i, c in zip(marked, centred):
        vals[i] = c
    return _normalize(vals, list(zip(task_kinds, roles)), scale=True, eps=eps)


def grpo(rewards: Sequence[float], prompt_groups: Sequence[Hashable], eps: float = 1e-6) -> list[float]:
    return _normalize(rewards, prompt_groups, scale=True, eps=eps)


def dr_grpo(rewards: Sequence[float], prompt_groups: Sequence[Hashable]) -> list[float]:
    return _normalize(rewards, prompt_groups, scale=False, eps=0.0)


def reinforce_half(passed: Sequence[bool], pass_rates: Sequence[float],
                   max_pass_rate: float = 0.5) -> list[float]:
    """1.0 for a correct rollout on a task with pass rate <= max_pass_rate, else 0.0 (dropped)."""
    if len(passed) != len(pass_rates):
        raise ValueError(f"{len(passed)} verdicts but {len(pass_rates)} pass rates")
    return [1.0 if ok and p <= max_pass_rate else 0.0 for ok, p in zip(passed, pass_rates)]


# ---- estimators over a batch of rollouts ----------------------------------------------------------

@dataclass(frozen=True)
class Scored:
    """What an estimator sees of one rollout."""

    reward: float
    role: str                    # teacher | student
    kind: str                    # task kind: lemma, lift, azr_deduction, real, ...
    group: Hashable              # the samples of one prompt (a task id, a proposal id)
    passed: bool | None = None   # student rollouts: the executor's verdict


Estimator = Callable[[Sequence[Scored]], list[float]]


def _trr(batch: Sequence[Scored]) -> list[float]:
    return task_relative_reinforce_pp([s.reward for s in batch], [s.kind for s in batch],
                                      [s.role for s in batch])


def _trr_prompt(batch: Sequence[Scored]) -> list[float]:
    return prompt_baseline_trr([s.reward for s in batch], [s.kind for s in batch],
                               [s.role for s in batch], [s.group for s in batch],
                               [s.passed is not None for s in batch])


def _grpo(batch: Sequence[Scored]) -> list[float]:
    return grpo([s.reward for s in batch], [(s.role, s.group) for s in batch])


def _dr_grpo(batch: Sequence[Scored]) -> list[float]:
    return dr_grpo([s.reward for s in batch], [(s.role, s.group) for s in batch])


def _reinforce_half(batch: Sequence[Scored]) -> list[float]:
    """REINFORCE½ for the solver: p is each task's pass rate over its samples in this batch.
    Other roles (a proposer) keep Task-Relative REINFORCE++ over their own (kind, role) groups."""
    solver = [i for i, s in enumerate(batch) if s.passed is not None]
    others = [i for i, s in enumerate(batch) if s.passed is None]
    out = [0.0] * len(batch)
    by_group = _groups([(batch[i].role, batch[i].group) for i in solver])
    rate = {g: sum(batch[solver[j]].passed for j in idx) / len(idx) for g, idx in by_group.items()}
    p = [rate[(batch[i].role, batch[i].group)] for i in solver]
    for i, a in zip(solver, reinforce_half([bool(batch[i].passed) for i in solver], p)):
        out[i] = a
    for i, a in zip(others, _trr([batch[i] for i in others])):
        out[i] = a
    return out


def _sft(batch: Sequence[Scored]) -> list[float]:
    return [1.0] * len(batch)


ESTIMATORS: dict[str, Estimator] = {
    "trr++": _trr,
    "trr++_prompt": _trr_prompt,
    "grpo": _grpo,
    "dr_grpo": _dr_grpo,
    "reinforce_half": _reinforce_half,
    "sft": _sft,
}
