"""R-Zero (Huang et al., 2025): a Challenger proposes tasks with no reference program, and the
Solver's own majority vote is the verifier.

* Where a task comes from: a fixed Challenger prompt (R-Zero has no anchors: the teacher prompt
  around one seed task, direction harder, an axis per prompt); the Challenger writes a question
  and test inputs (`roles.rzero`; a program it writes is dropped).
* Who verifies: the Solver answers each task `answers` times (10); every answer runs in the
  sandbox on the inputs; the label of each test is the majority output over the answers that
  ran; p̂ = share of answers agreeing with the labels on every test (`rzero_votes`). A task
  needs teacher.min_inputs labelled tests and teacher.require_distinct_outputs distinct labels.
* Challenger reward: max(0, 1 - 2|p̂ - 1/2| - r_rep), r_rep = λ |cluster| / B over BLEU
  clusters of the accepted questions, B = every Challenger sample of the iteration (`rzero_votes.repetition_penalties`); GRPO over the samples
  of each Challenger prompt.
* Solver: tasks with p̂ in `keep_band` (3-7 of 10 agreeing), GRPO per task against the
  pseudo-labels (the answers that made the vote are the group).

R-Zero trains two copies in alternating phases; here one model plays both roles in one update
per iteration, as AZR and GASP do. Diagnostic (toy world; never a reward): the share of
pseudo-labels that equal the truth, i.e. the outputs of the program the question describes
(`ctx.oracle.truth`) — teacher/rzero/label_accuracy over the tasks the Solver trains on,
label_accuracy_all over every labelled task, test_label_accuracy per test, truth_share the
share of labelled tasks the oracle could check.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field, model_validator

from selfplay_core import rewards
from selfplay_core import stages as S
from selfplay_core.methods.base import EstimatorName, Method, MethodConfig, Round, register
from selfplay_core.methods.rzero_votes import agreement, majority_labels, repetition_penalties, vote_key
from selfplay_core.problems import Problem, TestCase
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.rl.advantages import ESTIMATORS
from selfplay_core.roles.common import Rejection
from selfplay_core.roles.rzero import parse_challenger
from selfplay_core.roles.student import parse_student
from selfplay_core.run_context import IDENTITY_SEED
from selfplay_core.solve import SolveResult, student_prompt_for, with_student_stops

KIND = "rzero"


class RZeroConfig(MethodConfig):
    name: Literal["r-zero"] = "r-zero"
    advantage: EstimatorName = "grpo"
    challenger_prompts: int = Field(2, ge=1)        # prompts per iteration (an axis each)
    samples_per_prompt: int = Field(8, ge=1)        # the batch B = prompts x samples
    answers: int = Field(10, ge=2)                  # m: Solver answers per task, the vote
    keep_band: tuple[float, float] = (0.3, 0.7)     # p̂ of the tasks the Solver trains on
    bleu_threshold: float = Field(0.5, gt=0.0, le=1.0)   # BLEU distance below which clusters merge
    repetition_weight: float = Field(1.0, ge=0.0)   # λ in r_rep = λ |C| / B
    # The fixed Challenger prompt's task (R-Zero's prompt has no anchor; the toy model needs one).
    seed_question: str = IDENTITY_SEED.question
    # The program of that fixed prompt's task.
    seed_program: str = IDENTITY_SEED.code

    @model_validator(mode="after")
    def _band(self):
        lo, hi = self.keep_band
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"keep_band must satisfy 0 <= low <= high <= 1, got {(lo, hi)}")
        return self

    def check(self, run) -> None:
        if run.student.replay_tasks_per_iteration:
            raise ValueError("student.replay_tasks_per_iteration: method r-zero does not replay "
                             "its buffer; set it to 0")


@dataclass
class Vote:
    """The Solver's answers to one task and what their majority says."""

    completions: list
    rejections: list            # per answer: why it gave no program, else None
    runs: list                  # runs[answer][test]: vote key of its output, None if none
    values: list                # runs' decoded outputs, same shape
    excluded: list = field(default_factory=list)   # per answer: a harness error (no vote, not in p̂)
    labels: list = field(default_factory=list)


def majority_vote(ctx, problems: list[Problem], m: int) -> list[Vote]:
    """m Solver answers per task, each run in the sandbox on the task's inputs (one executor
    batch), and the per-test majority labels."""
    if not problems:
        return []
    sp = with_student_stops(S.student_sampling(ctx))
    groups = ctx.engine.generate([student_prompt_for(p) for p in problems], m, sp)
    votes, jobs = [], []
    for prob, comps in zip(problems, groups):
        n_tests = len(prob.tests)
        v = Vote(comps, [None] * len(comps), [[None] * n_tests for _ in comps],
                 [[None] * n_tests for _ in comps], [False] * len(comps))
        for j, c in enumerate(comps):
            ans = parse_student(c.text, prob.metadata["signature"], "f")
            if isinstance(ans, Rejection):
                v.rejections[j] = ans.reason
            else:
                jobs.append((v, j, prob, ans.code))
        votes.append(v)
    results = ctx.executor.run([(prob, code) for _, _, prob, code in jobs]) if jobs else []
    for (v, j, _, _), r in zip(jobs, results):
        if r.harness_error:     # the sandbox's fault, not the answer's: it neither votes nor counts
            v.excluded[j], v.rejections[j] = True, "harness_error"
            continue
        for t, (out, err) in enumerate(zip(r.outputs, r.errors)):
            if err is None:
                v.runs[j][t], v.values[j][t] = vote_key(out), out
        if not r.ok:
            v.rejections[j] = "runtime_error"
    for v in votes:
        v.labels = majority_labels(v.runs)
    return votes


@dataclass
class ChallengerReward:
    """max(0, 1 - 2|p̂ - 1/2| - r_rep) over the batch of accepted tasks (S.ProposerReward)."""

    threshold: float
    weight: float
    band: tuple[float, float]
    batch_size: int            # B: the Challenger samples of the iteration, valid or not
    last_penalties: list = field(default_factory=list)

    def __call__(self, ctx, accepted: list[Proposal]) -> list[float]:
        self.last_penalties = repetition_penalties([p.parsed.question for p in accepted],
                                                   self.threshold, self.weight, self.batch_size)
        return [rewards.rzero_challenger(p.pass_rate, r) for p, r in zip(accepted, self.last_penalties)]

    def metrics(self, accepted: list[Proposal]) -> dict[str, float]:
        n, lo, hi = len(accepted), *self.band
        pens = self.last_penalties
        return {"repetition": sum(pens) / n,
                "uncertainty": sum(1 - 2 * abs(p.pass_rate - 0.5) for p in accepted) / n,
                "in_band": sum(lo <= p.pass_rate <= hi for p in accepted) / n}


class RZeroRound(Round):
    kind = KIND
    diagnoses = True   # pseudo-label accuracy against the world's truth

    def __init__(self, config: RZeroConfig):
        self.config = config
        self.reward = ChallengerReward(config.bleu_threshold, config.repetition_weight, config.keep_band,
                                       config.challenger_prompts * config.samples_per_prompt)

    def propose(self, ctx) -> list[Proposal]:
        c = self.config
        seed = Anchor("rzero-seed", c.seed_question, c.seed_program)
        return S.propose(ctx, [seed] * c.challenger_prompts, self.kind, "harder", c.samples_per_prompt)

    def validate(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        """Parse (question, header, inputs), refuse evaluation look-alikes, then the vote: the
        pseudo-labelled tests become the task's tests, the answers its solve result."""
        t = ctx.config.teacher
        reasons: dict[str, int] = {}
        reject = S.rejector(reasons)
        todo = []
        for p in proposals:
            p.parsed = parse_challenger(p.completion.text, min_inputs=t.min_inputs, max_inputs=t.max_inputs)
            if isinstance(p.parsed, Rejection):
                reject(p, f"parse_{p.parsed.reason}")
                continue
            q = p.parsed.question
            if ctx.contamination.is_near_duplicate(q)[0] or S.overlaps_eval(ctx, q):
                reject(p, "eval_contamination")
                continue
            todo.append((p, Problem(
                id=p.id, kind="call", entry_point="f", prompt=q, time_limit_s=1.0, memory_limit_mb=256,
                tests=[TestCase(args=list(a), has_expected=False) for a in p.parsed.inputs],
                metadata={"signature": p.parsed.signature, "kind": p.kind})))
        for (p, prob), v in zip(todo, majority_vote(ctx, [prob for _, prob in todo], self.config.answers)):
            kept = [i for i, lab in enumerate(v.labels) if lab is not None]
            if all(v.excluded):
                reject(p, "harness_error")      # no reward: score leaves it unjudged
                continue
            if len(kept) < t.min_inputs:
                reject(p, "no_majority")
                continue
            if len({v.labels[i] for i in kept}) < t.require_distinct_outputs:
                reject(p, "degenerate_outputs")
                continue
            labels = [v.labels[i] for i in kept]
            runs = [[row[i] for i in kept] for row in v.runs]
            expected = [next(val[i] for row, val in zip(v.runs, v.values) if row[i] == v.labels[i])
                        for i in kept]
            prob.tests = [TestCase(args=prob.tests[i].args, expected=e) for i, e in zip(kept, expected)]
            agree = agreement(runs, labels)
            p.problem = prob
            p.solve = SolveResult(prob, v.completions, agree,
                                  [None if ok else (why or "disagrees") for ok, why in zip(agree, v.rejections)],
                                  excluded=list(v.excluded))
        S.log_acceptance(log, self.kind, proposals, reasons)

    def estimate(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        """p̂ from the vote: the share of answers that agree with the majority."""
        solved = [p for p in proposals if p.accepted]
        for p in solved:
            p.pass_rate = p.solve.c / p.solve.n
        if solved:
            ran = sum(r is None or r == "disagrees" for p in solved for r in p.solve.rejections)
            log.add(**{f"student/{self.kind}/ran": ran / sum(p.solve.n for p in solved)})

    def score(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        S.score(ctx, proposals, self.reward, log)

    def diagnose(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        acc = [p for p in proposals if p.accepted]
        if not acc or ctx.oracle is None:
            return
        truths = ctx.oracle.truth(ctx.executor, [(p.parsed.question, [tc.args for tc in p.problem.tests])
                                                 for p in acc])
        lo, hi = self.config.keep_band
        checked = [(p, label_matches(p.problem, truth)) for p, truth in zip(acc, truths) if truth is not None]
        out = {f"teacher/{self.kind}/truth_share": len(checked) / len(acc)}
        if checked:
            out[f"teacher/{self.kind}/label_accuracy_all"] = sum(all(m) for _, m in checked) / len(checked)
            out[f"teacher/{self.kind}/test_label_accuracy"] = (sum(sum(m) for _, m in checked)
                                                              / sum(len(m) for _, m in checked))
        trained = [m for p, m in checked if lo <= p.pass_rate <= hi]
        if trained:
            out[f"teacher/{self.kind}/label_accuracy"] = sum(all(m) for m in trained) / len(trained)
        log.add(**out)


def label_matches(problem: Problem, truth: list) -> list[bool]:
    """Per test: the pseudo-label is the true output (compared as the vote compares)."""
    return [vote_key(tc.expected) == vote_key(v) for tc, v in zip(problem.tests, truth)]


@register
class RZero(Method):
    Config = RZeroConfig

    def rounds(self, ctx, done: list[Proposal]):
        yield RZeroRound(self.config)

    def student_batch(self, ctx, proposals, log, call):
        """The pseudo-labelled tasks with p̂ in keep_band (then real tasks, if configured)."""
        lo, hi = self.config.keep_band
        solved = [p for p in proposals if p.solve is not None]
        kept = [p for p in solved if lo <= p.pass_rate <= hi]
        if solved:
            log.add(**{"student/trained/tasks": len(kept), "student/trained/share": len(kept) / len(solved)})
        student = [(p.kind, p.solve) for p in kept]
        if ctx.config.student.real_tasks_per_iteration:
            student += [("real", r) for r in call("solve_real", S.solve_real_tasks, ctx, log)]
        return student

    def advantages(self, ctx, rollouts):
        """The configured estimator, with the Challenger's samples grouped by their prompt (GRPO
        over the samples of one prompt, as R-Zero trains its Challenger) instead of one group per
        proposal."""
        return ESTIMATORS[self.config.advantage](challenger_groups(rollouts))


def challenger_groups(rollouts) -> list:
    """What the estimator sees of each rollout; a teacher rollout's group is its prompt."""
    return [dataclasses.replace(S.scored(r), group=("prompt", tuple(r.prompt_ids)))
            if r.role == "teacher" else S.scored(r) for r in rollouts]
