"""The method slot: what a self-play method is to the loop.

Every method of the family fills the loop's two slots — *where a task comes from* and *who
verifies it* — and picks its objective. It does so through the hooks below and nothing else:
the driver (`loop.driver`) calls `Method.run_iteration` without knowing which method runs, and
the shared stages (`selfplay_core.stages`) never branch on a method name. A method is one file
in this package: its config section (a `MethodConfig` subclass, selected by `name` under
`method:` in a run config) and its `Method` subclass, registered with `@register`.

One iteration, as `Method.run_iteration` runs it (each call in brackets is a stage of its own,
a Prefect task inside the flow):

    for round in method.rounds(ctx, done):       # one per kind of proposal, in order, built lazily
        props = [propose_<kind>]  round.propose(ctx)               # where a task comes from
        [validate_<kind>]  round.validate(ctx, props, log)         # who verifies: parse, gate, make the task
        [estimate_<kind>]  round.estimate(ctx, props, log)         # the solver's n attempts and verdicts: p
        [score_<kind>]     round.score(ctx, props, log)            # the proposer's reward, batch-level
        [fidelity_<kind>]  round.diagnose(ctx, props, log)         # oracle diagnostics (never a reward)
        round.remember(ctx, props)                                 # accepted tasks join the buffer
        done += props
    student = method.student_batch(ctx, done, log, call)           # [(kind, SolveResult)]
    [fill_student]  topped up to its size (student.fill: replay | real | none)
    [update]  rollouts = method.rollouts(ctx, done, student)
              advantages = method.advantages(ctx, rollouts)        # the objective
              learner steps; the engine gets the new weights

`ctx` is the run's `RunContext` (engine, executor, learner, world, buffers, state, rng) and
`log` its `IterationLog`; what a method keeps across iterations goes into
`ctx.state.method_state` (JSON values, saved with the run state, so a resume continues it). Hooks a method does not override do what GASP, AZR and RLVR share.
Examples of how the family's methods fill them:

* the Round: GASP's lemma then lift (`rounds.DescribedRound`: the teacher writes a question,
  a reference program and inputs; the reference, run twice in the sandbox, verifies), AZR's
  deduction/abduction triplets (`azr_triplets.TripletRound`: the answer is a value);
  a method without a reference program (R-Zero) verifies in `validate` by the solver's majority
  vote; one whose anchors are documents (SPICE) draws them in `propose`;
* `score` sees the whole batch, so a reward normalised over it (SGS) or one that needs the
  learner (CompassPlay: `ctx.learner`) is a Round's own business;
* `setup(ctx)` runs once per run, e.g. to load a frozen Guide or judge model (SGS);
* `artifacts(ctx)` names files a method writes after each iteration (SGS's solve curve);
* `rollouts` decides what the learner sees (STaR trains on a prompt without the hint it was
  sampled with); `advantages` is `method.advantage` of the config (`rl.advantages.ESTIMATORS`)
  unless overridden.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Iterator, Literal

from pydantic import ConfigDict

from selfplay_core import stages as S
from selfplay_core.frozen import FrozenConfig
from selfplay_core.records import IterationLog, Proposal
from selfplay_core.registry import Registry, titled_by_name
from selfplay_core.rl.advantages import ESTIMATORS
from selfplay_core.rl.rollout import Rollout

EstimatorName = Literal[tuple(ESTIMATORS)]  # type: ignore[valid-type]


class MethodConfig(FrozenConfig):
    """A method's own config section, `method:` in a run config; `name` selects the subclass."""

    model_config = ConfigDict(json_schema_extra=titled_by_name)

    # The method; picking another shows that method's options.
    name: str
    # How rollout rewards become advantages (rl.advantages.ESTIMATORS).
    advantage: EstimatorName = "trr++"

    def check(self, run) -> None:
        """Checks against the rest of the run config (a RunConfig): raise ValueError naming the
        keys. Called once when the run config is validated."""


class Round:
    """One kind of proposal within an iteration, from prompt to reward. `kind` names it in
    stage names (`propose_<kind>`), metrics (`teacher/<kind>/...`) and the buffer."""

    kind: str
    # Whether `diagnose` runs (as the stage `fidelity_<kind>`).
    diagnoses: ClassVar[bool] = False

    def propose(self, ctx) -> list[Proposal]:
        """Where a task comes from: choose anchors, prompt the proposer, one Proposal per sample."""
        raise NotImplementedError

    def validate(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        """Who verifies, part 1: parse each proposal and gate it; an accepted one gets its
        `problem` (a task whose expected outputs the verifier made), a rejected one its
        `rejection` reason."""
        raise NotImplementedError

    def estimate(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        """Who verifies, part 2: the solver's attempts at each accepted task and their verdicts
        (`solve`, `pass_rate`)."""
        raise NotImplementedError

    def score(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        """The proposer's reward of every proposal (`reward`), computed over the whole batch."""
        raise NotImplementedError

    def diagnose(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        """Diagnostics against an oracle (the toy world's fidelity); never part of a reward."""

    def remember(self, ctx, proposals: list[Proposal]) -> None:
        S.remember(ctx, proposals)


StudentTask = tuple  # (task kind, SolveResult): one task of the student batch


class Method:
    """A self-play method. Subclasses set `Config` and override the hooks they fill."""

    name: ClassVar[str]
    Config: ClassVar[type[MethodConfig]] = MethodConfig

    def __init__(self, config: MethodConfig):
        if not isinstance(config, self.Config):
            raise TypeError(f"{type(self).__name__} needs a {self.Config.__name__}, got "
                            f"{type(config).__name__}")
        self.config = config

    # ---- hooks --------------------------------------------------------------------------------
    def setup(self, ctx) -> None:
        """Once per run, after the run context is built (and again after a resume)."""

    def rounds(self, ctx, done: list[Proposal]) -> Iterator[Round]:
        """The proposal rounds of one iteration, in order. A generator: each round is built when
        the one before it has finished, so it can use those proposals (`done`, the iteration's
        proposals so far). No rounds: a method without a proposer (RLVR)."""
        return iter(())

    def student_batch(self, ctx, proposals: list[Proposal], log: IterationLog,
                      call: Callable) -> list[StudentTask]:
        """The tasks the student trains on: solved proposals in `student.train_band`, then the
        real training tasks of this iteration (stage `solve_real`)."""
        student = S.student_tasks(ctx, proposals, log)
        student += [("real", r) for r in call("solve_real", S.solve_real_tasks, ctx, log)]
        return student

    def rollouts(self, ctx, proposals: list[Proposal], student: list[StudentTask]) -> list[Rollout]:
        """What the learner trains on: every proposal's completion (role teacher, its reward) and
        the student's samples (role student, 1 if passed), capped at student.batch_size."""
        return S.rollouts(ctx, proposals, student)

    def advantages(self, ctx, rollouts: list[Rollout]) -> list[float]:
        """One advantage per rollout: the configured estimator over the whole batch."""
        return ESTIMATORS[self.config.advantage]([S.scored(r) for r in rollouts])

    def artifacts(self, ctx) -> list[tuple[str, str]]:
        """Files the method writes after each iteration (e.g. SGS's solve curve), as (local
        path, MLflow artifact folder); the driver logs them. None by default."""
        return []

    # ---- the iteration ----------------------------------------------------------------------
    def run_iteration(self, ctx, log: IterationLog, call: Callable):
        """One iteration through the hooks; `call(name, fn, *args)` runs each stage (directly,
        or as a Prefect task). Returns (proposals, student batch)."""
        done: list[Proposal] = []
        for rnd in self.rounds(ctx, done):
            k = rnd.kind
            props = call(f"propose_{k}", rnd.propose, ctx)
            call(f"validate_{k}", rnd.validate, ctx, props, log)
            call(f"estimate_{k}", rnd.estimate, ctx, props, log)
            call(f"score_{k}", rnd.score, ctx, props, log)
            if rnd.diagnoses:
                call(f"fidelity_{k}", rnd.diagnose, ctx, props, log)
            rnd.remember(ctx, props)
            done.extend(props)
        student = self.student_batch(ctx, done, log, call)
        if ctx.config.student.fill != "none":
            student = call("fill_student", S.fill_student_batch, ctx, student, log)
        call("update", S.update, ctx, self, done, student, log)
        log.proposals.extend(done)
        return done, student


# ---- the registry -----------------------------------------------------------------------------

_METHODS: Registry[type[Method]] = Registry("method", MethodConfig)
register = _METHODS.register      # class decorator: a Method under its config's `name`
registered = _METHODS.all         # {name: Method class}, in registration order


def method_for(config: MethodConfig) -> Method:
    """The method a run config's `method:` section selects."""
    return _METHODS.get(config.name)(config)
