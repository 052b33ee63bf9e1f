"""The learning study's protocol: arms, seeds, one budget, and the final evaluation — fixed
(and saved with its hash) before the first run, so results cannot reshape it.

An arm is a run config (a file of `configs/` plus overrides) or, for `base`, no training at all.
Diagnostic arms (toy world only) set `diagnostics.*`; they are reported as diagnostics and use
the oracle only to choose tasks, never in a reward.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from selfplay_core.frozen import FrozenConfig


class Arm(FrozenConfig):
    name: str
    label: str
    config: str | None = None                # a file under configs/; None: no training (base)
    overrides: tuple[str, ...] = ()
    kind: Literal["baseline", "method", "diagnostic", "ablation"] = "method"
    note: str = ""
    # In-run MLflow metrics that are the method's own diagnostic (issue 13: R-Zero's label
    # accuracy, SPICE's fidelity to the document, STaR's rationalization yield, ...): saved per
    # run with the final evaluation and reported beside the table.
    diagnostics: tuple[str, ...] = ()

    @property
    def trains(self) -> bool:
        return self.config is not None


class FinalEval(FrozenConfig):
    """What every arm's last checkpoint (and the start checkpoint, several times) is measured on."""

    goalpost_k: int = Field(64, ge=1)        # samples per goalpost: hits = goalposts with a pass
    heldout_n: int = Field(8, ge=1)          # samples per held-out task (all of the eval split)
    ks: tuple[int, ...] = (1, 8)
    floor_samplings: int = Field(3, ge=1)    # independent samplings of the start checkpoint
    temperature: float = 1.0
    max_new_tokens: int = 96
    seed: int = 90_001                       # sampling seed of arm evaluations (+ run seed)

    @model_validator(mode="after")
    def _ks(self):
        if any(k > self.heldout_n for k in self.ks):
            raise ValueError(f"final.ks must be <= final.heldout_n ({self.heldout_n})")
        return self


class Protocol(FrozenConfig):
    name: str = "toyworld-learning"
    arms: tuple[Arm, ...]
    seeds: tuple[int, ...] = (0, 1, 2)
    iterations: int = Field(12, ge=1)
    # Applied to every training arm (the one budget): e.g. in-loop evaluation cadence.
    common: tuple[str, ...] = ()
    final: FinalEval = FinalEval()

    @model_validator(mode="after")
    def _unique(self):
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arm names must be unique, got {names}")
        return self

    def key(self) -> str:
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def select(self, names: list[str] | None) -> "Protocol":
        if not names:
            return self
        known = {a.name: a for a in self.arms}
        bad = [n for n in names if n not in known]
        if bad:
            raise ValueError(f"unknown arm(s) {bad}; the protocol's arms are {sorted(known)}")
        return self.model_copy(update={"arms": tuple(known[n] for n in names)})


def default_protocol() -> Protocol:
    """The pre-registered study of issue 17 (see docs/results.md)."""
    return Protocol(arms=DEFAULT_ARMS, common=STUDY_COMMON)


class NotAStudyFolder(ValueError):
    """A folder without the protocol.json that `selfplay study` writes before its first run."""


def saved_protocol(folder: str | Path) -> Protocol:
    """The protocol a study folder's runs were fixed with (its protocol.json)."""
    path = Path(folder) / "protocol.json"
    if not path.is_file():
        raise NotAStudyFolder(f"{folder}: not a study folder (no protocol.json); give the --out "
                              "of a `selfplay study` run")
    return Protocol.model_validate(json.loads(path.read_text())["protocol"])


# The toy oracle's reading of a GASP-style teacher's lemmas and lifts (diagnostics, never rewards).
PROPOSAL_DIAGNOSTICS = ("teacher/lemma/fidelity", "teacher/lift/fidelity", "teacher/lemma/true_variant",
                        "teacher/lift/true_variant", "teacher/lemma/acceptance")
# The gradient-relevance arms' in-loop metrics: the judge's cosines and gates, and (toy oracle,
# diagnostic only) whether it ranks true variants above the rest.
GRAD_RELEVANCE_DIAGNOSTICS = ("teacher/lemma/true_variant", "teacher/lemma/grad_cosine",
                              "teacher/lemma/grad_gated", "teacher/lift/grad_gated",
                              "teacher/lemma/grad_cosine_true_variant", "teacher/lemma/grad_cosine_other")

# Issue 50: the teacher sees a goalpost's question only; an arm whose judge or teacher reads the
# goalposts' reference programs (code or gradient relevance, statement-deletion lemmas, the
# de-edit teacher bootstrapped on sighted prompts) is the privileged ablation and says so.
SIGHTED = "method.privileged_sighted_teacher=true"

DEFAULT_ARMS: tuple[Arm, ...] = (
    Arm(name="base", label="start checkpoint (no training)", kind="baseline",
        note="the floor: the start checkpoint sampled floor_samplings times"),
    Arm(name="rlvr", label="RLVR", config="rlvr-tiny-cpu.yaml", kind="baseline",
        note="real training split (depth 1-2) plus the goalposts"),
    Arm(name="azr", label="AZR (unguided)", config="azr-tiny-cpu.yaml", kind="baseline"),
    Arm(name="gasp", label="GASP", config="tiny-cpu.yaml",
        diagnostics=("teacher/lemma/fidelity", "teacher/lift/fidelity",
                     "teacher/lemma/true_variant", "teacher/lift/true_variant")),
    Arm(name="gasp+rlvr", label="GASP + RLVR", config="gasp-rlvr-tiny-cpu.yaml"),
    # Issue 50: the setting every GASP-family arm above this line was first run in, as an
    # explicitly privileged control (the teacher reads each goalpost's reference program).
    Arm(name="gasp-sighted", label="GASP sighted (privileged)", config="gasp-sighted-tiny-cpu.yaml",
        kind="ablation",
        note="GASP with the teacher shown each goalpost's reference program under the solution "
             "header (method.privileged_sighted_teacher): what a real goalpost lacks",
        diagnostics=PROPOSAL_DIAGNOSTICS),
    Arm(name="oracle-filter", label="oracle filter (diagnostic)", config="tiny-cpu.yaml",
        overrides=("diagnostics.oracle_filter=true",), kind="diagnostic",
        note="GASP; unfaithful proposals never reach the student (teacher rewards unchanged)"),
    Arm(name="oracle-curriculum", label="oracle curriculum (diagnostic)", config="tiny-cpu.yaml",
        overrides=("diagnostics.oracle_curriculum=true",), kind="diagnostic",
        note="no model teacher: true lemmas of the goalposts and true lifts of them, student only"),
    Arm(name="gasp-dynamic", label="GASP, dynamic goalposts", config="tiny-cpu.yaml",
        overrides=("method.dynamic_goalposts={solved_checks: 2}", "eval.goalpost_every=2"),
        note="a goalpost solved at 2 consecutive checks is replaced by the next unsolved candidate"),
    Arm(name="gasp-no-solution-grad", label="GASP, no gradient on the proposal's program",
        config="tiny-cpu.yaml", overrides=("teacher.train_solution=false",), kind="ablation"),
    Arm(name="gasp-teacher-kl", label="GASP, teacher KL anchor 0.1", config="tiny-cpu.yaml",
        overrides=("learner.role_kl={teacher: 0.1}",), kind="ablation"),
    Arm(name="gasp-role-norm", label="GASP, per-role loss, teacher weight 0.3", config="tiny-cpu.yaml",
        overrides=("learner.loss_agg=role_token_mean", "learner.role_weights={teacher: 0.3}"),
        kind="ablation"),
    # Added after the teacher-phase study (2 Dec 2026): where does GASP lose against the oracle
    # curriculum? Take away the teacher's update (then the student's batch, then also its band).
    Arm(name="gasp-no-teacher-update", label="GASP, no teacher update (student rollouts only)",
        config="tiny-cpu.yaml", overrides=("teacher.train=false",), kind="ablation",
        note="the real teacher proposes and is scored, but only the student's samples update "
             "the weights, as in the oracle curriculum"),
    Arm(name="gasp-no-teacher-update-band", label="GASP, no teacher update, student band [0.1, 0.7]",
        config="tiny-cpu.yaml", overrides=("teacher.train=false", "student.train_band=[0.1, 0.7]"),
        kind="ablation",
        note="as gasp-no-teacher-update, and the student trains only on proposals it solves "
             "10-70 % of the time (the oracle curriculum keeps lemmas in [0.3, 0.7], lifts in "
             "[0.1, 0.5]): it then differs from the oracle curriculum in its proposals alone"),
    # Issue 12 (added after the issue-17 protocol was written): SGS, and GASP with SGS's Guide.
    Arm(name="sgs", label="SGS (Guide, REINFORCE½)", config="sgs-tiny-cpu.yaml",
        note="Conjecturer on unsolved targets (the goalposts), frozen Guide, R_solve x R_guide, "
             "REINFORCE½; targets/fit/A is its solve asymptote"),
    Arm(name="gasp-guide", label="GASP x Guide", config="gasp-guide-tiny-cpu.yaml",
        note="GASP; in-band rewards times R_guide / 8, proposals below 0.25 kept from the student",
        diagnostics=("teacher/lemma/true_variant", "teacher/lift/true_variant",
                     "guide/lemma/accuracy/relevance", "guide/lemma/gated", "guide/lift/gated")),
    # Added 2 Dec 2026 after the decomposition study (0 % of GASP's accepted proposals are true
    # one-step variants of their parent) and before any run of it.
    Arm(name="gasp-guide-relevance", label="GASP x Guide, relevance only",
        config="gasp-guide-tiny-cpu.yaml",
        overrides=("method.judge.score=relevance", "method.judge.gate=0.4"), kind="ablation",
        note="GASP; in-band rewards times the Guide's relevance to the goalpost / 5, proposals "
             "below relevance 2 of 5 kept from the student (R_guide is 0 for every depth-4 "
             "proposal, the depth of an on-path lift)",
        diagnostics=("teacher/lemma/true_variant", "teacher/lift/true_variant",
                     "guide/lemma/accuracy/relevance", "guide/lemma/gated", "guide/lift/gated")),
    # Added 4 Dec 2026 after GASP on the six-seed deep pool (1.2 % of its lemmas true one-step
    # variants; its lemmas drift from the goalpost's program: constants changed, two steps
    # dropped), before any run of it: a judge that reads code alone, no model, no oracle.
    Arm(name="gasp-code-relevance", label="GASP x code relevance",
        config="tiny-cpu.yaml", overrides=(SIGHTED, "method.judge={name: code, power: 4, gate: 0.85}"),
        kind="ablation",
        note="GASP; in-band rewards times (line similarity of the proposal's program to its "
             "parent's)^4, proposals below similarity 0.85 (or copies) kept from the student",
        diagnostics=("teacher/lemma/true_variant", "teacher/lift/true_variant",
                     "teacher/lemma/code_similarity", "teacher/lemma/code_gated",
                     "teacher/lift/code_gated")),
    # Added 5 Dec 2026 after the ceiling measurement (the teacher writes a true lemma for at most
    # 5 of 37 deep goalposts in 16 samples) and a scratch probe (executor edits cover 6 of 15
    # goalposts a solution-first teacher still fails, free lemmas 0), before any run of it.
    Arm(name="gasp-edit", label="GASP, lemma programs edited by the executor",
        config="gasp-edit-tiny-cpu.yaml", kind="ablation",
        note="GASP; each lemma's program is its goalpost's reference with one statement deleted "
             "(the executor's edit), the teacher writes the question and inputs for it; lifts "
             "and rewards as GASP",
        diagnostics=PROPOSAL_DIAGNOSTICS),
    # Added 5 Dec 2026 after the gasp-edit study (per iteration of 10 edit lemmas 4.8 failed in
    # the sandbox and 2.2 repeated an earlier deletion), before any run of it.
    Arm(name="gasp-edit-screened", label="GASP, executor-edited lemmas, screened",
        config="gasp-edit-tiny-cpu.yaml", overrides=("method.edit_screen=true",),
        kind="ablation",
        note="gasp-edit; the executor keeps deletions that run on the goalpost's tests and change "
             "an output, and draws ones not yet in the buffer first",
        diagnostics=("teacher/lemma/fidelity", "teacher/lemma/true_variant",
                     "teacher/lemma/acceptance", "teacher/lemma/usable_edits")),
    # Added 5 Dec 2026 (10:55 UTC) after goalpost_roles measured the de-edit checkpoint writing a
    # true one-step lemma for 28 of the deep-pool study's 37 goalposts (36 % of 592 proposals),
    # where the study's own start checkpoint writes one for 5; before any run of it. Not GASP
    # (one model plays both roles there): the decomposition of its gap to the oracle curriculum.
    # Its note is hashed into the protocol key, so it keeps its registered text (the script is
    # lab/teacher_bootstrap.py now).
    Arm(name="gasp-frozen-teacher", label="GASP loop, a separate frozen teacher (not one model)",
        config="tiny-cpu.yaml",
        overrides=(SIGHTED, "teacher.model=runs/de-edit/model", "teacher.train=false"), kind="ablation",
        note="GASP's rounds, bands, gates and student update; every proposal is written by the "
             "frozen checkpoint runs/de-edit/model (benchmarks/teacher_bootstrap.py, README) and "
             "the learner trains the student only: can the loop turn a teacher that writes true "
             "lemmas into goalpost hits, as the oracle curriculum does?",
        diagnostics=PROPOSAL_DIAGNOSTICS),
    # Added 5 Dec 2026 (11:09 UTC) after gasp-frozen-teacher's seeds 0-4 (10, 13, 9, 7, 17 hits of
    # 37; in the loop 33 of its 40 accepted p = 0 lemmas were unfaithful, seed 0), before any run
    # of it: the student band the oracle curriculum has, without the oracle.
    Arm(name="gasp-frozen-teacher-band", label="GASP loop, separate frozen teacher, student band [0.1, 0.7]",
        config="tiny-cpu.yaml",
        overrides=(SIGHTED, "teacher.model=runs/de-edit/model", "teacher.train=false",
                   "student.train_band=[0.1, 0.7]"), kind="ablation",
        note="gasp-frozen-teacher, and the student trains only on proposals it solves 10-70 % of "
             "the time (a p = 0 proposal of this teacher is mostly unfaithful): it then differs "
             "from the oracle curriculum in its proposals alone",
        diagnostics=PROPOSAL_DIAGNOSTICS),
    # Added 5 Dec 2026 (11:24 UTC) after gasp-frozen-teacher-band (14.0 hits of 37 against the
    # frozen teacher's 11.7 without the band), before any run of it: the band with GASP's own
    # teacher, the other cell of teacher x band.
    Arm(name="gasp-band", label="GASP, student band [0.1, 0.7]", config="tiny-cpu.yaml",
        overrides=("student.train_band=[0.1, 0.7]",), kind="ablation",
        note="GASP (one model, the teacher trained), and the student trains only on proposals it "
             "solves 10-70 % of the time: is the band or the separate teacher what lifts "
             "gasp-frozen-teacher-band?",
        diagnostics=PROPOSAL_DIAGNOSTICS),
    # Added 5 Dec 2026 (14:10 UTC), before any run of them: the separate teacher of the two arms
    # above, now trained by its own learner on GASP's teacher reward (two-model asymmetric
    # self-play). Does the learnability reward keep, improve or spend a capable teacher's
    # curriculum? Not GASP either (two models).
    Arm(name="gasp-trained-teacher-band", label="GASP loop, separate teacher trained, student band [0.1, 0.7]",
        config="tiny-cpu.yaml",
        overrides=(SIGHTED, "teacher.model=runs/de-edit/model", "teacher.train=true",
                   "student.train_band=[0.1, 0.7]"), kind="ablation",
        note="gasp-frozen-teacher-band, with the teacher updated by its own learner on its "
             "rollouts and GASP's learnability rewards (the student's learner takes the "
             "student's rollouts only)",
        diagnostics=PROPOSAL_DIAGNOSTICS),
    Arm(name="gasp-trained-teacher", label="GASP loop, separate teacher trained",
        config="tiny-cpu.yaml",
        overrides=(SIGHTED, "teacher.model=runs/de-edit/model", "teacher.train=true"), kind="ablation",
        note="gasp-frozen-teacher, with the teacher updated by its own learner (the other cell "
             "of frozen/trained x band)",
        diagnostics=PROPOSAL_DIAGNOSTICS),
    # Added 5 Dec 2026 (15:46 UTC) after the two trained-teacher arms (the trained teacher's
    # true lemmas halved over the run), before any run of it: a relevance term with no oracle in
    # the trained teacher's reward and gate.
    Arm(name="gasp-trained-teacher-band-coderel",
        label="GASP loop, separate teacher trained x code relevance, student band [0.1, 0.7]",
        config="tiny-cpu.yaml",
        overrides=(SIGHTED, "teacher.model=runs/de-edit/model", "teacher.train=true",
                   "student.train_band=[0.1, 0.7]", "method.judge={name: code, power: 4, gate: 0.85}"),
        kind="ablation",
        note="gasp-trained-teacher-band, with the band reward times the line similarity of the "
             "proposal's program to its parent's to the 4th power, and proposals below 0.85 kept "
             "from the student (gasp-code-relevance's settings): does a relevance term keep a "
             "trained teacher on its goalposts?",
        diagnostics=PROPOSAL_DIAGNOSTICS),
    # Added 5 Dec 2026 (evening) after the trained-teacher arms (neither the learnability band,
    # the Guide nor code similarity gives GASP a relevance signal), before any run of it: the
    # model's own gradients judge whether a proposal is a step toward its goalpost.
    Arm(name="gasp-grad-relevance", label="GASP x gradient relevance",
        config="tiny-cpu.yaml", overrides=(SIGHTED, "method.judge={name: gradient, gate: 0.0}"),
        kind="ablation",
        note="GASP; in-band rewards times max(0, cos) / the round's largest cosine, cos = cosine "
             "of the student's gradient on the proposal with the gradient toward its goalpost's "
             "reference program (last block); proposals with cos <= 0 kept from the student",
        diagnostics=GRAD_RELEVANCE_DIAGNOSTICS),
    # Added 6 Dec 2026 (06:14 UTC) after gasp-grad-relevance held on 1 of 3 builds, before any
    # run of it: its gain came from selecting toward the goalposts' solutions, so give the judge
    # twice the proposals to select from, the cap meant to keep the student's batch at its size
    # (it grew: proposals with p = 0 or 1 are not judged, so not capped; docs/methods.md).
    Arm(name="gasp-grad-wide", label="GASP x gradient relevance, 2x proposals, top 5 to the student",
        config="tiny-cpu.yaml",
        overrides=(SIGHTED, "method.judge={name: gradient, gate: 0.0, student_top: 5}", "method.proposals_per_anchor=4"),
        kind="ablation",
        note="gasp-grad-relevance with 4 proposals per goalpost and per lemma (GASP's 2), of which "
             "at most the 5 most aligned per round (cos > 0) reach the student: the judge selects "
             "from twice as many, the student batch stays the size gasp-grad-relevance's was",
        diagnostics=GRAD_RELEVANCE_DIAGNOSTICS),
    # Added 6 Dec 2026 (09:15 UTC) after gasp-grad-wide, before any run of it: the judge scores
    # each proposal's per-task (Dr. GRPO) student gradient, but GASP's TRR++ takes one baseline
    # per (kind, role), so the real update also pushes every task's samples up or down as a whole,
    # p = 0 / 1 proposals (never judged) included. A per-prompt baseline makes the update the judged one.
    Arm(name="gasp-grad-prompt", label="GASP x gradient relevance, per-prompt student baseline",
        config="tiny-cpu.yaml",
        overrides=(SIGHTED, "method.judge={name: gradient, gate: 0.0}", "method.advantage=trr++_prompt"),
        kind="ablation",
        note="gasp-grad-relevance with trr++_prompt: each student sample's baseline is its own "
             "task's mean, so the student's step on a proposal is the direction the judge scored "
             "and a proposal solved by all or none of the samples (not judged) teaches nothing",
        diagnostics=GRAD_RELEVANCE_DIAGNOSTICS),
    # Issue 13 (added after the issue-12 rows): the rest of the family, each with its diagnostic.
    Arm(name="r-zero", label="R-Zero (majority-vote labels)", config="rzero-tiny-cpu.yaml",
        diagnostics=("teacher/rzero/label_accuracy", "teacher/rzero/label_accuracy_all"),
        note="no reference program: the Solver's majority vote over 10 answers labels the tests; "
             "label accuracy against the toy world's true programs is the diagnostic"),
    Arm(name="spice", label="SPICE (document-grounded)", config="spice-tiny-cpu.yaml",
        diagnostics=("teacher/spice/fidelity", "teacher/spice/acceptance"),
        note="the Challenger reads a page of the toy primitives library; the page's function "
             "verifies; fidelity = the question describes the page's function (oracle)"),
    Arm(name="star", label="STaR (rationalization)", config="star-tiny-cpu.yaml",
        diagnostics=("student/rationalized/yield", "student/trained/rationalized"),
        note="real training split; failed tasks retried with expected outputs as a hint, kept "
             "programs trained without it"),
    Arm(name="compassplay", label="CompassPlay (gradient alignment)", config="compassplay-tiny-cpu.yaml",
        diagnostics=("teacher/compass/cosine", "compass/reward_gain_corr", "teacher/compass/eligible"),
        note="harder variants of held-in real tasks rewarded by the cosine of their solver-loss "
             "gradient with the reference tasks' (last block + final norm)"),
)

# Every training arm: the in-loop evaluations are thinned (the final evaluation measures), and
# the runs' own floor and verdict evaluations are left to the study's.
STUDY_COMMON: tuple[str, ...] = ("eval.every=6", "eval.goalpost_every=6", "eval.verdict=false",
                                 "eval.goalpost_floor_n=16")
