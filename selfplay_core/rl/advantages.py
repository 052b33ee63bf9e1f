"""Advantage estimators: pure functions from rewards (+ group keys) to per-sample advantages.

* Task-Relative REINFORCE++ (AZR): normalize within each (task kind, role) group, so a
  teacher's learnability reward and a student's pass/fail never share a baseline.
* GRPO: normalize within each prompt group (the n samples of one prompt).
* Dr. GRPO: subtract the group mean only (no std division, which biases towards easy and
  hard prompts).
* REINFORCE½ (SGS): keep only correct rollouts on tasks the student solves at most half the
  time; their advantage is 1 (plain log-likelihood), the rest are dropped.

A group whose rewards are all equal carries no signal: its advantages are exactly 0.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Hashable, Sequence


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


ESTIMATORS = ("trr++", "grpo", "dr_grpo", "reinforce_half")
