"""STaR (Zelikman et al., 2022): fine-tune on your own correct answers, and on the answers you
find once you are shown a hint ("rationalization").

* Where a task comes from: the real training tasks (`student.real_tasks_per_iteration` a step,
  stage `solve_real`). Who verifies: the executor, against the task's tests.
* The completion is the rationale and the program together: what a model writes before or
  around its code (an instruct model's explanation) is trained on with it; the toy model
  writes programs only, so on the toy world STaR is expert iteration plus rationalization.
* Every task the student failed (no sample passed) is retried with a hint in its statement
  (stage `rationalize`): `hint: outputs` shows the expected outputs of `hint_tests` visible
  tests (LCB's public tests; the first tests of a toy task), `reference` the reference program
  where the task has one (else the outputs), `none` retries without a hint (the control: how
  much of the yield is a second draw). A hinted answer is verified on all of the task's tests.
* What the learner sees (`rollouts`): up to `keep_per_task` passing completions per task, the
  rationalized ones under the prompt *without* the hint (the first attempt's prompt tokens),
  their old logprobs rescored by the current policy under that prompt; advantage 1 for each
  (`sft`): a log-likelihood step. STaR restarts from the base model every outer iteration and
  fine-tunes on everything kept so far; here the policy is updated continually, like the
  other methods.

Diagnostic: student/rationalized/yield = failed tasks solved with the hint / failed tasks retried.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from selfplay_core import stages as S
from selfplay_core.methods.base import EstimatorName, Method, MethodConfig, register
from selfplay_core.problems import Problem, TestCase
from selfplay_core.records import IterationLog
from selfplay_core.rl.rollout import Rollout
from selfplay_core.solve import SolveResult, solve

FIRST, RATIONALIZED = "real", "rationalized"


class STaRConfig(MethodConfig):
    name: Literal["star"] = "star"
    advantage: EstimatorName = "sft"
    # What a rationalization retry is shown: expected outputs of visible tests, the reference program
    # (privileged), or nothing.
    hint: Literal["outputs", "reference", "none"] = "outputs"
    hint_tests: int = Field(2, ge=1)       # visible tests whose expected outputs the hint shows
    keep_per_task: int = Field(1, ge=1)    # passing completions trained on, per task and pass
    rationalize: bool = True               # False: no retry (STaR without rationalization)

    def check(self, run) -> None:
        if run.student.real_tasks_per_iteration == 0:
            raise ValueError("method star trains on real tasks: set student.real_tasks_per_iteration > 0")
        if run.student.replay_tasks_per_iteration:
            raise ValueError("student.replay_tasks_per_iteration: method star has no buffer to "
                             "replay; set it to 0")
        if run.teacher.model:
            raise ValueError("teacher.model: method star has no teacher (its hints come from "
                             "the real tasks); drop teacher.model")


@dataclass
class Rationalization(SolveResult):
    """Samples drawn under a hinted prompt; `train_prompt_ids` is the prompt without the hint."""

    train_prompt_ids: list[int] = field(default_factory=list)


def _show_test(problem: Problem, tc: TestCase) -> str:
    if tc.stdin is not None:
        return f"input:\n{tc.stdin.rstrip()}\noutput:\n{str(tc.expected).rstrip()}"
    name = (problem.entry_point or "f").split(".")[-1]
    return f"{name}({', '.join(repr(a) for a in tc.args or [])}) == {tc.expected!r}"


def hint_text(problem: Problem, how: str, k: int) -> str | None:
    """The hint for one task; None when it has nothing to show (no visible test)."""
    if how == "none":
        return ""
    ref = (problem.metadata or {}).get("reference")
    if how == "reference" and ref:
        return f"Hint: a correct solution is\n{ref.rstrip()}"
    n_public = (problem.metadata or {}).get("n_public")
    visible = problem.tests[: k if n_public is None else min(k, n_public)]
    if not visible:
        return None
    return "Hint: the expected results of some tests are\n" + "\n".join(_show_test(problem, t) for t in visible)


def hinted(problem: Problem, how: str, k: int) -> Problem | None:
    """The task with the hint after its statement (same tests, same everything else)."""
    text = hint_text(problem, how, k)
    if text is None:
        return None
    return dataclasses.replace(problem, prompt=f"{(problem.prompt or '').rstrip()}\n{text}" if text
                               else problem.prompt)


@register
class STaR(Method):
    Config = STaRConfig

    def student_batch(self, ctx, proposals, log, call):
        first = call("solve_real", S.solve_real_tasks, ctx, log)
        failed = [r for r in first if r.n and r.c == 0]   # all harness errors: not a failure
        again = call("rationalize", self.rationalize, ctx, failed, log) \
            if failed and self.config.rationalize else []
        k = self.config.keep_per_task
        log.add(**{"student/real/solved": sum(r.c > 0 for r in first) / max(1, len(first)),
                   "student/trained/first_pass": sum(min(k, r.c) for r in first),
                   "student/trained/rationalized": sum(min(k, r.c) for r in again)})
        return [(FIRST, r) for r in first] + [(RATIONALIZED, r) for r in again]

    def rationalize(self, ctx, failed: list[SolveResult], log: IterationLog) -> list[Rationalization]:
        """Each failed task once more with its hint; the tasks a hinted sample solved."""
        c = self.config
        todo = []
        for r in failed:
            ids = r.completions[0].prompt_token_ids if r.completions else None
            h = hinted(r.problem, c.hint, c.hint_tests)
            if ids and h is not None:
                todo.append((r, h, list(ids)))
        if not todo:
            return []
        res = solve(ctx.engine, ctx.executor, [h for _, h, _ in todo], ctx.config.student.samples_per_task,
                    S.student_sampling(ctx))
        solved = [Rationalization(first.problem, r.completions, r.passed, r.rejections, r.excluded,
                                  train_prompt_ids=ids)
                  for (first, _, ids), r in zip(todo, res) if r.c > 0]
        log.add(**{"student/rationalized/retried": len(todo), "student/rationalized/solved": len(solved),
                   "student/rationalized/yield": len(solved) / len(todo),
                   "student/rationalized/pass_rate": sum(r.c for r in res) / max(1, sum(r.n for r in res))})
        return solved

    def rollouts(self, ctx, proposals, student) -> list[Rollout]:
        """Up to keep_per_task passing completions per task, advantage to come from `sft`; a
        rationalization under its prompt without the hint, its old logprobs rescored there."""
        temp = ctx.config.engine.temperature
        rolls, rescore = [], []
        for kind, res in student:
            kept = [comp for comp, ok in res.scored()       # harness errors: no rollout
                    if ok and comp.token_ids and comp.logprobs is not None][: self.config.keep_per_task]
            for comp in kept:
                prompt = getattr(res, "train_prompt_ids", None) or comp.prompt_token_ids
                r = Rollout(list(prompt), list(comp.token_ids), list(comp.logprobs), 0.0, "student",
                            {"kind": kind, "group": res.problem.id, "reward": 1.0, "passed": True},
                            temperature=temp)
                rolls.append(r)
                if isinstance(res, Rationalization):
                    rescore.append(r)
        if rescore:
            with ctx.learner_turn():
                for r, lps in zip(rescore, ctx.learner.completion_logprobs(rescore), strict=True):
                    r.old_logprobs = lps
        cap = ctx.config.student.batch_size
        if len(rolls) > cap:
            ctx.rng.shuffle(rolls)
            rolls = rolls[:cap]
        return rolls
