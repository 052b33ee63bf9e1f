"""CompassPlay: the proposer is rewarded for tasks whose training signal points where the
reference tasks' does.

Slots: the task comes from the teacher writing a variant (`direction`) of a reference task
(`rounds.DescribedRound`: question + reference program + inputs; the sandbox verifies by running
the reference twice). The reward of each *eligible* proposal (0 < p < 1, as in the paper; the
others get `ineligible_reward`) is the cosine between

* g_task — the gradient of the solver's loss on that task: the policy-gradient loss of the
  Reasoner's n samples with Dr. GRPO advantages `(r_i - p) / tokens`, i.e. the direction the
  update would move the solver on it;
* g_ref — the gradient of the mean supervised loss (token-mean NLL of a correct solution) over
  a fixed reference set: `reference: real` (held-in real training tasks) or `goalposts` (the run's
  goalposts). A correct solution is the task's reference program where it has one, else the
  solver's own passing samples; a reference task with neither is left out (counted).

Both gradients are taken over a cheap parameter subset: the last `gradient_layers` transformer
blocks and the final norm (`last_layer_params`), through the learner's `policy_gradient` hook
(only those parameters require a gradient, so the backward stops there: about one forward per
task). The toy model's last block is ~1/5 of its 0.87 M parameters; Qwen2.5-7B's is 233 M of
7.6 B (0.93 GB as float32 per gradient). Measured cost per proposal: `compass/time_per_proposal_s`.

Metrics: teacher/compass/{proposals,acceptance,reward,pass_rate,eligible,cosine},
compass/{params,param_share,reference_tasks,time_reference_s,time_per_proposal_s}.

Diagnostic (does the reward predict the gain it claims?): each iteration, before its update, the
solver's pass rate on the reference set (`compass/reference_pass_rate`, n = student.samples_per_task
samples per task) measures what the previous update did; `compass/reward_gain_corr` is the rank
correlation, over the run so far, of an iteration's mean reward (cosine) with the change of that
pass rate across its update (`reward_gain_pairs`), from 3 pairs on. The history lives in the run
state, so a resumed run keeps it.
"""

from __future__ import annotations

import dataclasses
import random
import re
import time
from typing import Literal

from pydantic import Field

from selfplay_core import stages as S
from selfplay_core.config_errors import ConfigError
from selfplay_core.goalpost_view import goalpost_view
from selfplay_core.methods.base import EstimatorName, Method, MethodConfig, register
from selfplay_core.methods.rounds import DescribedRound
from selfplay_core.problems import Problem
from selfplay_core.records import Anchor, Proposal
from selfplay_core.rl.rollout import Rollout
from selfplay_core.roles.student import student_completion
from selfplay_core.solve import signature_for, solve, student_prompt_for

KIND = "compass"


class CompassConfig(MethodConfig):
    name: Literal["compassplay"] = "compassplay"
    advantage: EstimatorName = "trr++"
    # Tasks the teacher proposes per iteration.
    proposals_per_iteration: int = Field(16, ge=1)
    # What the teacher is asked for, relative to the task in its prompt.
    direction: Literal["easier", "harder"] = "harder"
    # Tasks whose gradient is the compass: the world's real training tasks, or the goalposts.
    reference: Literal["real", "goalposts"] = "real"
    # Reference tasks in the compass gradient.
    reference_tasks: int = Field(8, ge=1)
    # Last transformer blocks whose gradients are compared (a cheap parameter subset).
    gradient_layers: int = Field(1, ge=1)
    ineligible_reward: float = 0.0   # p in {0, 1}: the task moves nothing (the paper scores none)
    # The privileged ablation: a goalpost among the reference tasks (reference: goalposts, or a
    # goalpost among the real tasks) is shown with its reference program, and its correct
    # solution for g_ref is that program. Off: its question only, and g_ref takes the solver's
    # own passing samples of it (selfplay_core/goalpost_view.py).
    privileged_sighted_teacher: bool = False

    def check(self, run) -> None:
        if run.student.replay_tasks_per_iteration:
            raise ValueError("student.replay_tasks_per_iteration: method compassplay does not "
                             "replay its buffer; set it to 0")


def cosine(a, b) -> float:
    """Cosine of two flat tensors; 0 when either is zero."""
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float((a @ b) / (na * nb))


def ranks(xs: list[float]) -> list[float]:
    """0-based ranks, ties given their mean rank."""
    from scipy.stats import rankdata

    return [float(r) - 1.0 for r in rankdata(xs, method="average")]


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (scipy's: Pearson on tie-averaged ranks); nan when either
    input is constant (scipy warns there; the caller reports nan as "no signal")."""
    import warnings

    from scipy.stats import spearmanr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # ConstantInputWarning: nan is the documented answer
        return float(spearmanr(a, b).statistic)


def reward_gain_pairs(history: list[list]) -> list[tuple[float, float]]:
    """From [[iteration, mean reward or None, reference pass rate before its update], ...]:
    (mean reward of iteration t, pass rate at t + 1 - pass rate at t) for consecutive
    iterations where t had a reward (no eligible proposal: no pair)."""
    rows = sorted(history, key=lambda h: h[0])
    return [(a[1], b[2] - a[2]) for a, b in zip(rows, rows[1:])
            if b[0] == a[0] + 1 and a[1] is not None]


def dr_grpo_weights(passed: list[bool], lengths: list[int]) -> list[float]:
    """Per-sample advantages of one task's samples for g_task: (r_i - mean r) / total tokens."""
    p = sum(passed) / len(passed)
    tokens = max(1, sum(lengths))
    return [(float(ok) - p) / tokens for ok in passed]


def nll_weights(lengths_by_task: list[list[int]]) -> list[list[float]]:
    """Advantages that make `-sum a log pi` the mean over tasks of the mean over a task's
    solutions of their token-mean NLL."""
    k = len(lengths_by_task)
    return [[1.0 / (k * len(ls) * max(1, n)) for n in ls] for ls in lengths_by_task]


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def last_layer_params(model, k: int = 1) -> list:
    """The parameters of the last k transformer blocks and the final norm (`...norm.weight`
    outside the blocks), found by name (`layers.<i>.`)."""
    named = list(model.named_parameters())
    idx = [int(m.group(1)) for n, _ in named if (m := _LAYER.search(n))]
    if not idx:
        raise ValueError("compassplay: no `layers.<i>.` parameters in this model; cannot pick its "
                         "last layers")
    top = max(idx)
    out = []
    for n, p in named:
        m = _LAYER.search(n)
        if (m and int(m.group(1)) > top - k) or (not m and re.search(r"(?:^|\.)norm\.weight$", n)):
            out.append(p)
    return out


class CompassReward:
    """The ProposerReward of one round: cosine(g_task, g_ref) for eligible proposals."""

    def __init__(self, method: "CompassPlay"):
        self.method = method
        self.last: dict[str, float] = {}

    def __call__(self, ctx, accepted: list[Proposal]) -> list[float]:
        m = self.method
        eligible = [p for p in accepted if 0.0 < p.pass_rate < 1.0]
        out = {id(p): m.config.ineligible_reward for p in accepted}
        self.last = {"eligible": len(eligible) / len(accepted)}
        if eligible:
            t0 = time.perf_counter()
            g_ref = m.reference_gradient(ctx)
            t1 = time.perf_counter()
            cos = [cosine(m.task_gradient(ctx, p), g_ref) for p in eligible]
            t2 = time.perf_counter()
            for p, c in zip(eligible, cos):
                out[id(p)] = c
            self.last.update(cosine=sum(cos) / len(cos), time_reference_s=t1 - t0,
                             time_per_proposal_s=(t2 - t1) / len(eligible))
        return [out[id(p)] for p in accepted]

    def metrics(self, accepted: list[Proposal]) -> dict[str, float]:
        return dict(self.last)


@register
class CompassPlay(Method):
    Config = CompassConfig

    def setup(self, ctx) -> None:
        c = self.config
        st = ctx.state.method_state.setdefault(KIND, {})
        pool = ctx.real_tasks if c.reference == "real" else ctx.goalposts
        by_id = {p.id: p for p in pool}
        if not by_id:
            raise ConfigError(f"method.reference: {c.reference!r} has no tasks in this world "
                              "(compassplay); use the other reference (real or goalposts)")
        ids = st.get("reference_ids") or sorted(random.Random(f"compass-ref:{ctx.config.seed}").sample(
            sorted(by_id), min(c.reference_tasks, len(by_id))))
        st["reference_ids"] = ids
        self._goalpost_ids = set(ctx.goalposts_by_id())
        self.references: list[Problem] = [by_id[i] for i in ids if i in by_id]
        self.params = last_layer_params(ctx.learner.unwrapped, c.gradient_layers)
        total = sum(p.numel() for p in ctx.learner.unwrapped.parameters())
        self.subset = sum(p.numel() for p in self.params)
        self.param_share = self.subset / total

    @property
    def last_reward(self) -> float | None:
        """This iteration's mean reward over eligible proposals (None: none was eligible)."""
        last = getattr(self, "_reward", None)
        return last.last.get("cosine") if last is not None else None

    def rounds(self, ctx, done: list[Proposal]):
        self._reward = CompassReward(self)
        picked = [ctx.rng.choice(self.references) for _ in range(self.config.proposals_per_iteration)]
        yield DescribedRound(KIND, [self.anchor(p) for p in picked], self.config.direction, 1, self._reward)

    def blind(self, prob: Problem) -> bool:
        """Whether a reference task is seen as a goalpost (question only): every goalpost, also
        one among the real training tasks, unless the run is the privileged ablation."""
        return prob.id in self._goalpost_ids and not self.config.privileged_sighted_teacher

    def anchor(self, prob: Problem) -> Anchor:
        gid = prob.id if self.config.reference == "goalposts" else None
        if self.blind(prob):
            return dataclasses.replace(goalpost_view(prob), goalpost_id=gid)
        return Anchor(prob.id, prob.prompt or "", prob.metadata.get("reference", ""), goalpost_id=gid)

    def student_batch(self, ctx, proposals, log, call):
        log.add(**{"compass/params": self.subset, "compass/param_share": self.param_share})
        call("compass_gain", self.track_gain, ctx, log)
        return super().student_batch(ctx, proposals, log, call)

    def track_gain(self, ctx, log) -> None:
        """The reward-vs-gain diagnostic (module docstring): the reference pass rate now (after
        the previous update), this iteration's mean reward, their running rank correlation."""
        res = solve(ctx.engine, ctx.executor, self.references, ctx.config.student.samples_per_task,
                    S.student_sampling(ctx))
        rate = sum(r.c for r in res) / max(1, sum(r.n for r in res))
        st = ctx.state.method_state[KIND]
        hist = [h for h in st.get("gain_history", []) if h[0] != ctx.state.iteration]
        hist.append([ctx.state.iteration, self.last_reward, rate])
        st["gain_history"] = hist
        out = {"compass/reference_pass_rate": rate}
        pairs = reward_gain_pairs(hist)
        if len(pairs) >= 3:
            rho = spearman([a for a, _ in pairs], [b for _, b in pairs])
            if rho == rho:
                out["compass/reward_gain_corr"] = rho
        log.add(**out)

    # ---- the two gradients ------------------------------------------------------------------
    def task_gradient(self, ctx, p: Proposal):
        return task_gradient(ctx, p, self.params)

    def reference_gradient(self, ctx):
        sols = self.reference_solutions(ctx)
        ctx.state.method_state[KIND]["reference_used"] = len(sols)
        return nll_gradient(ctx.learner, sols, self.params)

    def reference_solutions(self, ctx) -> list[list[tuple[list[int], list[int]]]]:
        """Per reference task, its correct solutions as (prompt ids, completion ids): the
        reference program's body, else the solver's passing samples now; tasks with none are
        left out."""
        tok = ctx.tokenizer
        out, unsolved = [], []
        for prob in self.references:
            ids = None if self.blind(prob) else reference_ids(tok, prob)
            if ids is None:
                unsolved.append(prob)
            else:
                out.append([ids])
        if unsolved:
            res = solve(ctx.engine, ctx.executor, unsolved, ctx.config.student.samples_per_task,
                        S.student_sampling(ctx))
            for r in res:
                good = [(c.prompt_token_ids, c.token_ids) for c, ok in zip(r.completions, r.passed)
                        if ok and c.token_ids and c.prompt_token_ids is not None]
                if good:
                    out.append(good)
        return out


def task_gradient(ctx, p: Proposal, params):
    """The gradient of the solver's policy-gradient loss on one task over `params`: its own n
    samples with Dr. GRPO advantages, i.e. the direction the update moves it under a per-prompt
    baseline (`trr++_prompt`, `dr_grpo`; TRR++ adds a push of all its samples by the task's
    distance from its kind's mean pass rate)."""
    comps = p.solve.completions
    weights = dr_grpo_weights(list(p.solve.passed), [len(c.token_ids) for c in comps])
    rolls = [Rollout(list(c.prompt_token_ids), list(c.token_ids), list(c.logprobs), a, "student",
                     temperature=ctx.config.engine.temperature)
             for c, a in zip(comps, weights) if c.token_ids and c.prompt_token_ids is not None]
    return ctx.learner.policy_gradient(rolls, params)


def nll_gradient(learner, sols: list[list[tuple[list[int], list[int]]]], params):
    """The gradient over `params` of the mean over tasks of the mean over a task's solutions of
    their token-mean NLL; `sols` per task, its solutions as (prompt ids, completion ids). No
    task: a zero gradient."""
    weights = nll_weights([[len(c) for _, c in task] for task in sols])
    rolls = [Rollout(list(pr), list(c), [0.0] * len(c), w, "student", temperature=1.0)
             for task, ws in zip(sols, weights) for (pr, c), w in zip(task, ws)]
    return learner.policy_gradient(rolls, params)


def reference_ids(tok, prob: Problem) -> tuple[list[int], list[int]] | None:
    """A task's student prompt and its reference body as a completion, tokenized; None without a
    usable reference body (`reference_body`)."""
    body = reference_body(prob)
    if body is None:
        return None
    return (tok(student_prompt_for(prob), add_special_tokens=False)["input_ids"],
            tok(student_completion(body), add_special_tokens=False)["input_ids"])


def reference_body(prob: Problem) -> str | None:
    """The body of a described task's reference program (the student writes the body after
    the header it is shown); None for a benchmark problem or a reference not headed by it."""
    ref = (prob.metadata or {}).get("reference")
    if not ref or (prob.metadata or {}).get("benchmark"):
        return None
    try:
        header = signature_for(prob)
    except ValueError:
        return None
    first, _, body = ref.partition("\n")
    return body if first.strip() == header.strip() and body.strip() else None
