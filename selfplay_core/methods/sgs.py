"""SGS — Self-Guided Self-Play (Bailey et al., "Scaling Self-Play with Self-Guidance", 2026):
one model as Conjecturer, Solver and (a frozen copy of it) Guide, aimed at a set of unsolved
targets (the run's goalposts).

Each iteration:

* targets: `targets_per_iteration` targets not yet solved, drawn from the target set;
* conjecture (stage `propose_conjecture` ...): for each, the Conjecturer writes
  `proposals_per_target` synthetic problems conditioned on that one target (the teacher's
  described-task prompt, `direction` easier by default: a stepping stone towards it); the
  sandbox verifies them like every described task; the Solver's n attempts give each its p;
* score: the frozen Guide judges each accepted problem against its target (relevance 0-5,
  redundancy 0/1, complexity 0-4 -> R_guide); R_solve = 0 if p = 0 or p is in the batch's
  easiest 30 %, else 1 - p; the Conjecturer's reward is R_synth = R_solve x R_guide, min-max
  normalised within the batch (`rewards.r_synth`); rejected proposals get the usual penalties;
* solve_targets: the Solver attempts the drawn targets (student.samples_per_task each); a
  target passed once is solved for good: the cumulative solve rate of the target set against
  the generations spent on it, and its scaling-law fit R(C) = R0 + (A - R0)/(1 + (Cmid/C)^B)
  (`evaluation.solve_curve`), are logged per iteration (`targets/...`, `targets/fit/A`) and
  plotted (`solve_curve.png`, MLflow `plots/`); the curve is kept in the run state, so a
  resume continues it;
* update: the Solver trains with REINFORCE½ (`method.advantage: reinforce_half`): the
  log-likelihood of correct rollouts on tasks (targets and synthetic problems) it solves at
  most half of the time; the Conjecturer's rollouts get Task-Relative REINFORCE++ over R_synth.

The toy world's oracle grades the Guide each iteration (`guide/conjecture/accuracy/...`), as a
diagnostic only.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import Field

from selfplay_core import rewards
from selfplay_core import stages as S
from selfplay_core.evaluation.solve_curve import CumulativeSolve, fit_scaling_law
from selfplay_core.methods.base import EstimatorName, Method, MethodConfig, register
from selfplay_core.methods.guide_judge import GuideConfig, judge_proposals, load_guide, oracle_accuracy
from selfplay_core.goalpost_view import goalpost_anchors
from selfplay_core.methods.rounds import DescribedRound
from selfplay_core.records import IterationLog, Proposal
from selfplay_core.solve import solve

KIND = "conjecture"
STATE_KEY = "sgs"
FIT_PREFIX = "targets/fit"
PLOT_NAME = "solve_curve.png"
TARGETS_NAME = "sgs_targets.json"


class SGSConfig(MethodConfig):
    name: Literal["sgs"] = "sgs"
    advantage: EstimatorName = "reinforce_half"
    # Unsolved targets drawn each iteration: the Conjecturer is conditioned on each and the
    # Solver attempts each (None: every unsolved target).
    targets_per_iteration: int | None = Field(8, ge=1)
    # Synthetic problems the Conjecturer writes per target.
    proposals_per_target: int = Field(2, ge=1)
    # R_solve is 0 for the synthetic problems in this share of the batch that are easiest.
    easiest_share: float = Field(0.3, ge=0, le=1)
    # What the Conjecturer is asked for, relative to its target.
    direction: Literal["easier", "harder"] = "easier"
    # The frozen Guide that judges each conjecture's relevance to its target.
    guide: GuideConfig = GuideConfig()
    # The privileged ablation: the Conjecturer is also shown each target's reference program
    # (a real target has none). Off: the target's question only (selfplay_core/goalpost_view.py).
    privileged_sighted_teacher: bool = False

    def check(self, run) -> None:
        self.guide.check(run, "method.guide")


class SynthReward:
    """R_synth of the accepted proposals of one batch, from their pass rates and the Guide's
    R_guide that `ConjectureRound.score` stored on each (`p.extra["guide"]`)."""

    def __init__(self, share: float):
        self.share = share

    def __call__(self, ctx, accepted: list[Proposal]) -> list[float]:
        ps = [p.pass_rate for p in accepted]
        guide = [p.extra["guide"]["r_guide"] for p in accepted]
        solve_r = rewards.r_solve(ps, self.share)
        synth = rewards.r_synth(ps, guide, self.share)
        for p, s, x in zip(accepted, solve_r, synth):
            p.extra["r_solve"] = s
            p.extra["r_synth_raw"] = s * p.extra["guide"]["r_guide"]
        return synth

    def metrics(self, accepted: list[Proposal]) -> dict[str, float]:
        n = len(accepted)
        easy = rewards.easiest_share([p.pass_rate for p in accepted], self.share)
        return {"r_solve": sum(p.extra["r_solve"] for p in accepted) / n,
                "unsolved_share": sum(p.pass_rate == 0.0 for p in accepted) / n,
                "easiest_share": sum(easy) / n}


class ConjectureRound(DescribedRound):
    """The teacher's described-task round, anchored on unsolved targets, scored by SGS."""

    def __init__(self, anchors, per_anchor: int, direction: str, guide, share: float):
        super().__init__(KIND, anchors, direction, per_anchor, SynthReward(share))
        self.guide = guide

    def score(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        acc = [p for p in proposals if p.accepted]
        judge_proposals(self.guide, acc, [p.anchor.question for p in acc], log, KIND)
        S.score(ctx, proposals, self.reward, log)

    def diagnose(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        S.fidelity(ctx, proposals, log)
        acc = [p for p in proposals if p.accepted]
        oracle_accuracy(ctx, acc, [p.anchor.question for p in acc], log, KIND)


@register
class SGS(Method):
    Config = SGSConfig

    def setup(self, ctx) -> None:
        self.guide = load_guide(ctx, self.config.guide)
        ms = ctx.state.method_state
        if STATE_KEY not in ms:
            ms[STATE_KEY] = {"curve": CumulativeSolve([g.id for g in ctx.goalposts]).to_json(),
                             "rounds": []}
        self._drawn: list = []

    def _curve(self, ctx) -> CumulativeSolve:
        return CumulativeSolve.from_json(ctx.state.method_state[STATE_KEY]["curve"])

    def rounds(self, ctx, done: list[Proposal]):
        unsolved = set(self._curve(ctx).unsolved())
        pool = [g for g in ctx.goalposts if g.id in unsolved]
        k = self.config.targets_per_iteration or len(pool)
        self._drawn = ctx.rng.sample(pool, min(k, len(pool)))
        if not self._drawn:
            return
        anchors = goalpost_anchors(self._drawn, self.config.privileged_sighted_teacher)
        yield ConjectureRound(anchors, self.config.proposals_per_target, self.config.direction,
                              self.guide, self.config.easiest_share)

    def student_batch(self, ctx, proposals, log, call):
        student = super().student_batch(ctx, proposals, log, call)
        return student + call("solve_targets", self.solve_targets, ctx, log)

    def solve_targets(self, ctx, log: IterationLog) -> list:
        """The Solver's attempts at this iteration's targets; the cumulative solve rate of the
        target set against the generations spent, and its scaling-law fit."""
        st = ctx.state.method_state[STATE_KEY]
        curve = CumulativeSolve.from_json(st["curve"])
        targets = self._drawn
        res = []
        if targets:
            res = solve(ctx.engine, ctx.executor, targets, ctx.config.student.samples_per_task,
                        S.student_sampling(ctx))
            curve.record([(r.problem.id, list(r.passed)) for r in res])
            st["rounds"].append({"iteration": ctx.state.iteration + 1,
                                 "targets": [{"id": r.problem.id, "n": r.n, "c": r.c} for r in res],
                                 "generations": curve.generations, "solve_rate": curve.rate})
        st["curve"] = curve.to_json()
        n = sum(r.n for r in res)
        log.add(**{"targets/cumulative_solve_rate": curve.rate, "targets/solved": len(curve.solved),
                   "targets/total": len(curve.target_ids), "targets/generations": curve.generations,
                   "targets/attempted": len(res),
                   "targets/pass_rate": sum(r.c for r in res) / n if n else 0.0})
        fit = fit_scaling_law(*zip(*curve.curve)) if curve.curve else None
        st["fit"] = None if fit is None else {k: v for k, v in vars(fit).items()}
        if fit is not None:
            log.add(**fit.metrics(FIT_PREFIX))
        return [("target", r) for r in res]

    def artifacts(self, ctx) -> list[tuple[str, str]]:
        """The solve curve with its fit (plots/) and the per-iteration target attempts."""
        from selfplay_core.evaluation.solve_curve import ScalingFit
        from selfplay_core.tracking.plots import solve_curve

        st = ctx.state.method_state.get(STATE_KEY)
        if not st or ctx.run_dir is None:
            return []
        curve = CumulativeSolve.from_json(st["curve"])
        fit = ScalingFit(**st["fit"]) if st.get("fit") else None
        cfg = ctx.config
        plot = solve_curve([tuple(p) for p in curve.curve], ctx.run_dir / PLOT_NAME,
                           title=f"{cfg.method.name} seed {cfg.seed}: cumulative solve rate of the "
                                 "target set", fit=fit, targets=len(curve.target_ids))
        table = ctx.run_dir / TARGETS_NAME
        table.write_text(json.dumps({"solved": curve.solved, "rounds": st["rounds"],
                                     "fit": st.get("fit")}, indent=1))
        return [(str(plot), "plots"), (str(table), "sgs")]
