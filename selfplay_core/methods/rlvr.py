"""Real-data RLVR: the student trains on the real training split; no teacher, no proposals."""

from __future__ import annotations

from typing import Literal

from selfplay_core.methods.base import EstimatorName, Method, MethodConfig, register


class RLVRConfig(MethodConfig):
    name: Literal["rlvr"] = "rlvr"
    advantage: EstimatorName = "grpo"   # per-prompt groups of the real tasks' samples

    def check(self, run) -> None:
        if run.student.real_tasks_per_iteration == 0:
            raise ValueError("method rlvr trains on real tasks only: set "
                             "student.real_tasks_per_iteration > 0")
        if run.student.replay_tasks_per_iteration:
            raise ValueError("student.replay_tasks_per_iteration: method rlvr has no buffer to "
                             "replay; set it to 0")
        if run.teacher.model:
            raise ValueError("teacher.model: method rlvr has no teacher; drop teacher.model")


@register
class RLVR(Method):
    Config = RLVRConfig
    # No rounds: the base class's student batch is the real tasks alone.
