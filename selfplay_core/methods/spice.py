"""SPICE (Self-Play In Corpus Environments), and SCOPE's rubric path as its `rubric` option.

Slots: the task comes from a *document the solver never sees* — the Challenger reads one
documented function of a corpus (`datasets.documents`: a world's documents, e.g. the toy
world's primitives library; a folder of code files; or a Hugging Face dataset of them) and
writes a question plus test inputs; the document's function is the reference behaviour (the
executor runs it, twice, for the expected outputs). The Reasoner sees only the question and
the function's header.

Rewards (`rewards.spice_challenger`): each valid proposal `exp(-(Var - 0.25)^2 / 0.02)` with
Var = p(1 - p) over the Reasoner's samples, each invalid one `invalid_penalty` (-0.1); the
Reasoner 1 / 0 from the executor. Objective: Dr. GRPO with separate advantages per role — the
Challenger's proposals are grouped by document (all proposals from one document share a
baseline), the Reasoner's samples by task; no std division (`rl.advantages.dr_grpo`).

SCOPE (`rubric:` set): a frozen copy of the initial model writes a rubric from each document
and grades open-ended Reasoner answers ("explain what this function does") against it
(`methods.scope`); the same judge grades executor-verified answers, and its agreement with the
executor is logged (`scope/judge/*`).

Metrics: teacher/spice/{proposals,accepted,acceptance,reward,pass_rate,variance,fidelity},
rejections/spice/<reason>; with a rubric: scope/explain/{pass_rate,tasks}, scope/judge/*.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from selfplay_core import rewards
from selfplay_core import stages as S
from selfplay_core.datasets import documents as D
from selfplay_core.frozen import FrozenConfig
from selfplay_core.methods.base import EstimatorName, Method, MethodConfig, Round, register
from selfplay_core.problems import InputError, Problem, TestCase
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.roles import spice as role
from selfplay_core.roles.common import Rejection
from selfplay_core.methods.scope import Judge, fits

KIND = "spice"


class CorpusConfig(FrozenConfig):
    """Where the documents come from. toy: the toy world's primitives library; folder: every
    *.py under `path`; hub: a Hugging Face dataset (`path` = hub id, local folder or data file;
    `column` holds each file's text)."""

    # toy: the toy world's primitives; folder: *.py files; hub: a Hugging Face dataset.
    source: Literal["toy", "folder", "hub"] = "toy"
    # folder: the folder; hub: the hub id, a local folder or a data file.
    path: str | None = None
    name: str | None = None           # hub: the dataset's config name
    # hub: the dataset split.
    split: str = "train"
    # hub: the column that holds each file's text.
    column: str = "content"
    max_rows: int | None = Field(None, ge=1)   # hub: read at most this many files

    @model_validator(mode="after")
    def _path(self):
        if self.source == "toy" and self.path:
            raise ValueError("method.corpus.path is for source folder or hub; the toy library "
                             "is built in")
        if self.source != "toy" and not self.path:
            raise ValueError(f"method.corpus.path is required for source {self.source}")
        return self


class RubricConfig(FrozenConfig):
    """SCOPE: the frozen judge and its open-ended tasks."""

    explain_tasks_per_iteration: int = Field(2, ge=0)   # "explain what this function does"
    agreement_samples: int = Field(16, ge=0)   # executor-verified answers the judge also grades
    pass_score: float = Field(0.6, ge=0, le=1)  # a grade >= this (of 1) passes
    judge_model: str | None = None   # None: the run's starting weights, frozen
    # Longest rubric the judge writes, in tokens.
    max_new_tokens_rubric: int = Field(96, ge=1)
    # Longest grade the judge writes, in tokens.
    max_new_tokens_grade: int = Field(12, ge=1)


class SpiceConfig(MethodConfig):
    name: Literal["spice"] = "spice"
    advantage: EstimatorName = "dr_grpo"
    # The documents the Challenger grounds its tasks in.
    corpus: CorpusConfig = CorpusConfig()
    # Documents drawn per iteration.
    documents_per_iteration: int = Field(8, ge=1)
    proposals_per_document: int = Field(2, ge=1)   # > 1: the Challenger's Dr. GRPO group
    prompt: Literal["teacher", "document"] = "teacher"   # roles.spice: the toy model reads the first
    # The Challenger is rewarded most when the Reasoner's pass-rate variance p(1-p) is this (0.25: p =
    # 0.5).
    target_variance: float = Field(0.25, ge=0, le=0.25)
    # Width of the Gaussian reward around target_variance.
    width: float = Field(0.02, gt=0)
    # Challenger reward for a task that fails validation.
    invalid_penalty: float = -0.1
    rubric: RubricConfig | None = None   # SCOPE's rubric path

    def check(self, run) -> None:
        if self.corpus.source == "folder" and not Path(self.corpus.path).is_dir():
            raise ValueError(f"method.corpus.path {self.corpus.path}: folder not found")
        if run.student.replay_tasks_per_iteration:
            raise ValueError("student.replay_tasks_per_iteration: method spice does not replay "
                             "its buffer; set it to 0")


def load_documents(c: CorpusConfig) -> list[D.Document]:
    if c.source == "toy":   # a world's own documents (World.documents): the toy world's library
        from selfplay_core.worlds import world_class

        docs = world_class(c.source).documents()
    elif c.source == "folder":
        docs = D.folder_documents(c.path)
    else:
        docs = D.hub_documents(c.path, name=c.name, split=c.split, column=c.column, max_rows=c.max_rows)
    docs = D.dedupe(docs)
    if not docs:
        raise InputError(f"method.corpus ({c.source} {c.path or ''}): no usable documents — a "
                         "document is a top-level function with a docstring, positional "
                         "parameters and only pure-computation imports")
    return docs


def challenger_rewards(pass_rates: list[float | None], *, target: float = 0.25,
                       width: float = 0.02, invalid: float = -0.1) -> list[float]:
    """One reward per proposal: SPICE's variance reward for a valid one (its pass rate), the
    invalid penalty for a rejected one (None)."""
    return [invalid if p is None else rewards.spice_challenger(p, target=target, width=width)
            for p in pass_rates]


class DocumentRound(Round):
    """The Challenger writes `per_doc` tasks from each of `docs`; the document verifies."""

    kind = KIND
    diagnoses = True

    def __init__(self, docs: list[D.Document], config: SpiceConfig, judge=None):
        self.docs = {d.id: d for d in docs}
        self.config = config
        self.judge = judge

    def propose(self, ctx) -> list[Proposal]:
        t = ctx.config.teacher
        budget = ctx.config.engine.max_new_tokens_teacher
        plan = [(d, role.challenger_prompt(d, self.config.prompt, t.min_inputs)) for d in self.docs.values()]
        fitting = [(d, q) for d, q in plan if fits(ctx.proposer, q, budget)]
        self.too_long = len(plan) - len(fitting)   # logged by validate
        if not fitting:
            return []
        docs, prompts = [d for d, _ in fitting], [q for _, q in fitting]
        sp = S.teacher_sampling(ctx, stop=role.STOP)
        groups = ctx.proposer.generate(prompts, self.config.proposals_per_document, sp)
        return [Proposal(KIND, Anchor(d.id, d.description, d.source), "", "document", prompt, c,
                         id=f"it{ctx.state.iteration}/{KIND}/{ctx.next_id()}",
                         temperature=sp.temperature)
                for d, prompt, comps in zip(docs, prompts, groups) for c in comps]

    def validate(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        """Parse (question + inputs for the document's parameters), run the document's function
        on the inputs in two worker processes (identical outputs, enough distinct ones), then
        the near-duplicate and evaluation-overlap gates on the question."""
        t = ctx.config.teacher
        reasons: dict[str, int] = {}
        reject = S.rejector(reasons)
        todo = []
        for p in proposals:
            doc = self.docs[p.anchor.id]
            p.parsed = role.parse_challenger(p.completion.text, doc, style=self.config.prompt,
                                             min_inputs=t.min_inputs, max_inputs=t.max_inputs)
            if isinstance(p.parsed, Rejection):
                reject(p, f"parse_{p.parsed.reason}")
                continue
            prob = Problem(id=p.id, kind="call", entry_point=doc.entry_point, prompt=p.parsed.question,
                           tests=[TestCase(args=list(a), has_expected=False) for a in p.parsed.inputs],
                           time_limit_s=1.0, memory_limit_mb=256,
                           metadata={"reference": doc.source, "signature": doc.signature,
                                     "kind": KIND, "document": doc.id})
            todo.append((p, prob))
        S.gate_references(ctx, todo, reject, question_only=True, kinds=(KIND,))
        S.log_acceptance(log, KIND, proposals, reasons)
        if getattr(self, "too_long", 0):
            log.add(**{f"rejections/{KIND}/document_too_long": self.too_long})

    def estimate(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        S.estimate_pass_rates(ctx, proposals)

    def score(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        c = self.config
        rs = challenger_rewards([p.pass_rate if p.accepted else None for p in proposals],
                                target=c.target_variance, width=c.width, invalid=c.invalid_penalty)
        for p, r in zip(proposals, rs):
            p.reward = r
        acc = [p for p in proposals if p.accepted]
        if proposals:
            log.add(**{f"teacher/{KIND}/reward": sum(rs) / len(rs)})
        if acc:
            log.add(**{f"teacher/{KIND}/pass_rate": sum(p.pass_rate for p in acc) / len(acc),
                       f"teacher/{KIND}/variance": sum(p.pass_rate * (1 - p.pass_rate) for p in acc) / len(acc)})

    def diagnose(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        """The toy oracle: does the question describe the document's function? With a judge:
        its verdicts on executor-verified answers against the executor's."""
        if self.config.corpus.source == "toy":
            S.fidelity(ctx, proposals, log)
        if self.judge is not None:
            self.judge.agreement(ctx, [p for p in proposals if p.solve is not None], self.docs, log)


@register
class SPICE(Method):
    Config = SpiceConfig

    def setup(self, ctx) -> None:
        self.documents = load_documents(self.config.corpus)
        self.judge = None
        if self.config.rubric is not None:
            self.judge = Judge.for_run(ctx, self.config.rubric)

    def rounds(self, ctx, done: list[Proposal]):
        k = min(self.config.documents_per_iteration, len(self.documents))
        yield DocumentRound(ctx.rng.sample(self.documents, k), self.config, self.judge)

    def student_batch(self, ctx, proposals, log, call):
        student = super().student_batch(ctx, proposals, log, call)
        r = self.config.rubric
        if self.judge is not None and r.explain_tasks_per_iteration:
            docs = ctx.rng.sample(self.documents, min(r.explain_tasks_per_iteration, len(self.documents)))
            student += call("solve_explain", self.judge.solve_explain, ctx, docs, log)
        return student

    def rollouts(self, ctx, proposals, student):
        """The base rollouts, with each Challenger rollout grouped by its document: Dr. GRPO's
        baseline for a proposal is the mean reward of the proposals from the same document."""
        doc_of = {p.id: p.anchor.id for p in proposals}
        rolls = S.rollouts(ctx, proposals, student)
        for r in rolls:
            if r.role == "teacher":
                r.meta["group"] = doc_of[r.meta["group"]]
        return rolls
