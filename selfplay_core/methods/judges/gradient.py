"""The gradient judge (`method.judge: {name: gradient}`): is training the student on this
proposal a step toward its goalpost? Read from the model itself, no world oracle, no judge model.

For each accepted proposal the student has a gradient on (0 < p < 1: with all samples passing or
all failing its policy-gradient advantages are zero), the cosine between

* g_task: the gradient of the student's policy-gradient loss on the proposal, from its n samples
  with Dr. GRPO advantages (CompassPlay's `task_gradient`): the direction the update will move;
* g_goal: the gradient of the token-mean NLL of the proposal's *goalpost's* reference program
  under the student's prompt for the goalpost (a lift's goalpost too: hidden from its prompt, not
  from this judge): the direction that would make the goalpost's solution likelier.

Both over the last `layers` transformer blocks and the final norm (`last_layer_params`). A positive
cosine says a step on the proposal is, locally, a step toward the goalpost's solution. The
student never trains on the goalpost's program; GASP's teacher already reads it in its prompt.

Reward (`reward: multiply`): an in-band reward times `alignment_weights` of the round's cosines,
max(0, cos) / the round's largest positive cosine, so the round's most aligned proposal keeps its
full band reward (the cosines of one round are small and of one scale: ~0.01-0.2). Gate (`gate`):
a proposal with a gradient and a cosine <= gate does not reach the student; one without a
per-task gradient (p = 0 or 1) is left as GASP leaves it. The judged direction is that of the
student's policy-gradient step on the proposal (up to scale, before clipping and the KL term)
only under a per-prompt baseline (`method.advantage: trr++_prompt` or `dr_grpo`): GASP's TRR++
takes one baseline per (task kind, role), so it also pushes every task's samples up or down as a
whole, p = 0 / 1 tasks included, a part of the step the cosine does not see. With `student_top`, at
most that many of a round's judged proposals, the most aligned, reach the student: a teacher
asked for more proposals per goalpost gives the judge more to choose from. Proposals with p = 0
or 1 are not judged and not capped, so the student's batch still grows with them.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import Field

from selfplay_core.config_errors import ConfigError
from selfplay_core.methods.compassplay import (cosine, last_layer_params, nll_gradient, reference_body,
                                               reference_ids, task_gradient)
from selfplay_core.methods.judges.base import Judge, JudgeConfig
from selfplay_core.records import IterationLog, Proposal


class GradientJudgeConfig(JudgeConfig):
    """The cosine of the student's gradient on a proposal with the gradient toward its
    goalpost's reference program (module docstring)."""

    reads_reference = True

    # The judge: the student's own gradients, no judge model.
    name: Literal["gradient"] = "gradient"
    # Last transformer blocks whose gradients are compared.
    layers: int = Field(1, ge=1)
    # multiply: scale the in-band reward by the gradient alignment; none: gate only.
    reward: Literal["multiply", "none"] = "multiply"
    # A proposal whose gradient cosine to the goalposts' is at most this does not reach the student
    # (None: no gate).
    gate: float | None = Field(0.0, ge=-1, le=1)
    # Keep only this many most-aligned proposals for the student (None: all that pass the gate).
    student_top: int | None = Field(None, ge=1)

    def build(self) -> "GradientJudge":
        return GradientJudge(self)


def top_aligned(cosines: list[float | None], k: int | None) -> list[bool]:
    """Which judged proposals are among the round's k largest cosines (ties: the earlier one);
    True for every judged one when k is None, False for unjudged ones (None)."""
    judged = sorted((i for i, c in enumerate(cosines) if c is not None), key=lambda i: (-cosines[i], i))
    keep = set(judged if k is None else judged[:k])
    return [i in keep for i in range(len(cosines))]


def alignment_weights(cosines: list[float | None]) -> list[float]:
    """Reward weights in [0, 1] from one round's cosines: max(0, c) / the largest positive c;
    0 where there is no cosine (None) or no positive one."""
    top = max((c for c in cosines if c is not None and c > 0), default=0.0)
    return [max(0.0, c) / top if top > 0 and c is not None else 0.0 for c in cosines]


class GradientJudge(Judge):
    weight_key = "grad_weight"

    def setup(self, ctx) -> None:
        # g_goal needs each goalpost's reference program: stop before the run starts without one
        goalposts = ctx.goalposts
        missing = [g.id for g in goalposts if reference_body(g) is None]
        if missing:
            raise ConfigError(f"method.judge (gradient): {len(missing)} of {len(goalposts)} goalposts "
                              f"have no reference program headed by their signature (e.g. {missing[0]}); "
                              "it takes the gradient toward each goalpost's solution: use goalposts with "
                              "reference solutions or drop method.judge")

    def judge(self, ctx, kind: str, acc: list[Proposal], log: IterationLog) -> None:
        t0 = time.perf_counter()
        cos = self.cosines(ctx, acc)
        top = top_aligned(cos, self.config.student_top)
        for p, c, w, t in zip(acc, cos, alignment_weights(cos), top):
            p.extra["grad_cosine"] = c
            p.extra["grad_weight"] = w
            p.extra["gated"] = c is not None and ((self.config.gate is not None and c <= self.config.gate)
                                                  or not t)
        judged = [c for c in cos if c is not None]
        if judged:
            log.add(**{f"teacher/{kind}/grad_cosine": sum(judged) / len(judged),
                       f"teacher/{kind}/grad_judged": len(judged) / len(acc),
                       f"teacher/{kind}/grad_time_s": time.perf_counter() - t0})
            if self.config.gate is not None or self.config.student_top is not None:
                log.add(**{f"teacher/{kind}/grad_gated": sum(p.extra["gated"] for p in acc) / len(acc)})

    def cosines(self, ctx, acc: list[Proposal]) -> list[float | None]:
        """cos(g_task, g_goal) per accepted proposal; None where the student has no gradient on it
        or its goalpost is unknown (a lift whose lemma came from an anchor without one)."""
        params = last_layer_params(ctx.learner.unwrapped, self.config.layers)
        goals = ctx.goalposts_by_id()
        g_goal: dict[str, object] = {}
        out: list[float | None] = []
        for p in acc:
            gid = p.anchor.goalpost_id
            if not 0.0 < p.pass_rate < 1.0 or gid not in goals:
                out.append(None)
                continue
            if gid not in g_goal:
                # toward the goalpost's solution: its reference body's NLL under its student prompt
                g_goal[gid] = nll_gradient(ctx.learner, [[reference_ids(ctx.tokenizer, goals[gid])]], params)
            out.append(cosine(task_gradient(ctx, p, params), g_goal[gid]))
        return out

    def diagnose(self, ctx, kind: str, accepted: list[Proposal], log: IterationLog) -> None:
        """Toy world: does the cosine see what the oracle sees? Mean cosine of the judged true
        one-step variants of their parent, and of the rest (a diagnostic, never a reward)."""
        if ctx.oracle is None:
            return
        groups: dict[str, list[float]] = {"true_variant": [], "other": []}
        for p in accepted:
            c = p.extra.get("grad_cosine")
            if c is None or p.faithful is None:
                continue
            true = bool(p.faithful and ctx.oracle.variant(p.anchor.question, p.parsed.question, p.direction))
            groups["true_variant" if true else "other"].append(c)
        for name, cs in groups.items():
            if cs:
                log.add(**{f"teacher/{kind}/grad_cosine_{name}": sum(cs) / len(cs)})
