"""The pretraining corpus: student examples (task -> code), teacher examples (task -> variant) and
Guide examples (target + proposal -> judgments).

Two lessons from the feasibility runs are built in:
* A per-line bug rate in the student programs (default 30 % per algorithm line): a model trained
  only on clean code is confidently wrong (pass@8 ~ pass@1) and RL gets no signal; with noise the
  right program is the most likely one but not the only one.
* Teacher examples include depth 2 -> 3 (and 3 -> 4) "harder" pairs; without them the teacher
  never proposes beyond the student's depth. Depth-3/4 sources made easier are the lemma
  prompts of the goalposts. The teacher's programs are clean (`teacher_bug_rate` 0): a bug in a
  teacher target is a lesson in writing code its question does not describe, which is exactly
  the unfaithful proposal that poisons self-play (issue 17: ~74 % of accepted proposals of the
  v1 checkpoint, trained with a 10 % per-line teacher bug rate, were unfaithful).
* Guide examples (`roles.guide`): a target, a proposal near it or not, faithful or not, with the
  toy oracle's judgments (`toyworld.guide_oracle`) as the completion.

Held-out tasks (eval split, goalpost pool) never appear, on either side of a pair: exact tasks are
excluded, and for depth >= 2 every task that shares a held-out algorithm (whatever its
representation) too, so io variants cannot leak a held-out algorithm.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from selfplay_core.roles.guide import guide_completion, guide_prompt
from selfplay_core.roles.student import student_completion, student_prompt
from selfplay_core.roles.teacher import VARIANT_HEADER, teacher_completion, teacher_prompt
from selfplay_core.toyworld.primitives import PRIMITIVES
from selfplay_core.toyworld.tasks import SIGNATURE, Task, TaskError, sample_step, sample_task
from selfplay_core.toyworld.variants import variant


@dataclass
class Exclusion:
    keys: set = field(default_factory=set)          # exact tasks
    algorithms: set = field(default_factory=set)    # algorithm keys of held-out depth >= 2 tasks

    def add(self, task: Task) -> None:
        self.keys.add(task.key)
        if task.depth >= 2:
            self.algorithms.add(task.algorithm_key)

    def blocks(self, task: Task) -> bool:
        return task.key in self.keys or task.algorithm_key in self.algorithms


def mutate_step(step, rng: random.Random):
    """A plausible wrong line: another constant, or a primitive of the same type signature."""
    name, c = step
    p = PRIMITIVES[name]
    if p.has_const and rng.random() < 0.5:
        others = [k for k in p.consts if k != c]
        return (name, rng.choice(others))
    sib = [q for q in PRIMITIVES.values()
           if q.in_type == p.in_type and q.out_type == p.out_type and q.name != name]
    if not sib:  # e.g. `digits`: nothing of the same shape to confuse it with
        return step
    q = rng.choice(sib)
    return (q.name, rng.choice(q.consts) if q.has_const else None)


def noisy_program(task: Task, rng: random.Random, bug_rate: float) -> str:
    steps = [mutate_step(s, rng) if rng.random() < bug_rate else s for s in task.steps]
    return task.program(steps)


def program_body(program: str) -> str:
    """The lines after the signature (the student's completion)."""
    return program.split("\n", 1)[1]


def student_example(task: Task, rng: random.Random, bug_rate: float) -> str:
    body = program_body(noisy_program(task, rng, bug_rate))
    return student_prompt(task.description(), SIGNATURE) + student_completion(body)


def teacher_example(src: Task, dst: Task, axis: str, direction: str, rng: random.Random,
                    bug_rate: float, n_inputs: int, solution_first: bool = False) -> str:
    inputs = dst.sample_inputs(rng, n_inputs)
    rng.shuffle(inputs)
    return (teacher_prompt(src.description(), src.program(), axis, direction)
            + teacher_completion(dst.description(), noisy_program(dst, rng, bug_rate), inputs,
                                 solution_first=solution_first))


def edited_task_deletions(src: Task) -> list[tuple[str, Task]]:
    """The executor's statement deletions of `src`'s program (`program_edits`) that are programs
    of a toy task, with that task: the deletions a question can describe exactly. A deletion
    that breaks the type chain (a step fed the wrong type) has no description; the sandbox
    rejects it in the loop."""
    from selfplay_core.program_edits import statement_deletions
    from selfplay_core.toyworld.guide_oracle import parse_program

    out = []
    for code in statement_deletions(src.program()):
        task = parse_program(code, src.in_rep)
        if task is not None and task.program() == code:
            out.append((code, task))
    return out


def edit_description_example(src: Task, rng: random.Random, n_inputs: int,
                             exclusion: "Exclusion") -> str | None:
    """A teacher example in exactly the text GASP's executor-edited lemma round builds
    (method `gasp-edit`): the lemma prompt for `src`, the program made by
    deleting one of its statements written first, then the question that describes *that*
    program and inputs for it. It teaches the one thing that round asks of the teacher,
    describing a given program, which the solution-first pairs teach only for the true variants
    the teacher chose. None when no deletion of `src` is a toy task outside `exclusion`."""
    from selfplay_core.program_edits import EDIT_AXIS

    cands = [(code, t) for code, t in edited_task_deletions(src) if not exclusion.blocks(t)]
    if not cands:
        return None
    code, task = rng.choice(cands)
    inputs = task.sample_inputs(rng, n_inputs)
    rng.shuffle(inputs)
    return (teacher_prompt(src.description(), src.program(), EDIT_AXIS, "easier")
            + teacher_completion(task.description(), code, inputs, solution_first=True))


def _unfaithful_program(task: Task, rng: random.Random) -> str:
    """Code that does not do what the task's text says: one line changed (most often), or a
    step dropped or added — the kinds of mismatch the model's own proposals show."""
    from selfplay_core.toyworld.guide_oracle import parse_program, same_behaviour

    for _ in range(8):
        steps = list(task.steps)
        r = rng.random()
        i = rng.randrange(len(steps))
        if r < 0.7 or len(steps) == 1:
            steps[i] = mutate_step(steps[i], rng)
        elif r < 0.85:
            del steps[i]
        else:
            t = _type_before(task, i)
            s = sample_step(rng, t)
            if s is not None and s[0] in _SAME_TYPE[t]:
                steps.insert(i, s)
        program = task.program(steps)
        parsed = parse_program(program, task.in_rep)
        if parsed is not None and not same_behaviour(task, parsed):
            return program
    return task.program()


_SAME_TYPE = {t: {n for n, p in PRIMITIVES.items() if p.in_type == p.out_type == t}
              for t in ("ints", "int", "str")}


def _type_before(task: Task, i: int) -> str:
    from selfplay_core.toyworld.tasks import IN_REPS

    t = IN_REPS[task.in_rep].base
    for name, _ in task.steps[:i]:
        t = PRIMITIVES[name].out_type
    return t


def _with_redundant_step(task: Task, rng: random.Random) -> Task | None:
    """The task with one inserted step that changes nothing (sorting before a sum, ...)."""
    from selfplay_core.toyworld.guide_oracle import redundant_steps

    for _ in range(20):
        i = rng.randrange(task.depth + 1)
        t = _type_before(task, i)
        s = sample_step(rng, t)
        if s is None or s[0] not in _SAME_TYPE[t]:
            continue
        try:
            cand = Task(task.in_rep, task.steps[:i] + (s,) + task.steps[i:], task.out_rep)
        except TaskError:
            continue
        if redundant_steps(cand) > 0:
            return cand
    return None


def guide_case(target: Task, rng: random.Random, exclusion: "Exclusion",
               faithful_share: float = 0.5) -> tuple[Task, str]:
    """A proposal for `target` as the Guide should see them: near it (a variant, or a variant of
    a variant), or unrelated, sometimes with a redundant step; with faithful code or not."""
    proposal = None
    r = rng.random()
    if r < 0.45:
        proposal = variant(target, rng.choice(("f", "io")), rng.choice(("easier", "harder", "same")), rng)
    elif r < 0.6:
        first = variant(target, rng.choice(("f", "io")), rng.choice(("easier", "harder", "same")), rng)
        proposal = first and variant(first, rng.choice(("f", "io")), rng.choice(("easier", "same")), rng)
    elif r < 0.75:
        proposal = _with_redundant_step(target if rng.random() < 0.3 else
                                        _draw_task(rng, rng.choice((1, 2, 3)), exclusion), rng)
    if proposal is None or exclusion.blocks(proposal):
        proposal = _draw_task(rng, rng.choice((1, 2, 2, 3, 3, 4)), exclusion)
    code = proposal.program() if rng.random() < faithful_share else _unfaithful_program(proposal, rng)
    return proposal, code


def guide_example(target: Task, rng: random.Random, exclusion: "Exclusion") -> str:
    """A Guide training example: prompt, then the oracle's judgments as the completion."""
    from selfplay_core.toyworld.guide_oracle import judge

    proposal, code = guide_case(target, rng, exclusion)
    scores = judge(target, proposal.description(), code)
    return guide_prompt(target.description(), proposal.description(), code) + guide_completion(scores)


@dataclass(frozen=True)
class CorpusSettings:
    n_examples: int = 40000
    # Shares of the corpus; the rest of 1.0 (after the Guide's) goes to teacher variant pairs.
    student_depth_shares: tuple = ((1, 0.545), (2, 0.08), (3, 0.015))
    guide_share: float = 0.09
    # Depth of the task shown to the teacher in variant pairs. Sources deeper than
    # `harder_max_depth` only get "easier": a depth-5 proposal does not fit the default
    # teacher budget (192 tokens; a depth-4 -> 5 completion is ~180 on average).
    teacher_source_depths: tuple = ((1, 0.2), (2, 0.35), (3, 0.35), (4, 0.10))
    harder_max_depth: int = 3
    # Depths of Guide targets (goalposts are depth 3-4).
    guide_target_depths: tuple = ((2, 0.2), (3, 0.5), (4, 0.3))
    bug_rate: float = 0.3
    teacher_bug_rate: float = 0.0
    teacher_inputs: int = 4
    # True: the teacher writes its program first, then the question (an experiment, measured
    # worse: the program is an edit of the prompt's, the question unrelated; 3 % faithful).
    teacher_solution_first: bool = False
    # Share of the teacher examples that describe an executor's statement deletion of their
    # source (`edit_description_example`), drawn from sources of depth >= 2 in
    # `teacher_source_depths`: GASP with executor-edited lemmas described the forced program
    # faithfully 5.5 % of the time after a solution-first phase (lab/learning-studies.md).
    # 0: none (and the corpus is the same text as before the option existed).
    teacher_edit_share: float = 0.0

    def __post_init__(self):
        s = sum(w for _, w in self.student_depth_shares) + self.guide_share
        if not 0 < s <= 1:
            raise ValueError("student_depth_shares plus guide_share must sum to a value in (0, 1]")
        if not 0 <= self.bug_rate <= 1 or not 0 <= self.teacher_bug_rate <= 1:
            raise ValueError("bug rates must be in [0, 1]")
        if not 0 <= self.teacher_edit_share <= 1:
            raise ValueError("teacher_edit_share must be in [0, 1]")
        if self.teacher_edit_share and not any(d >= 2 and w > 0 for d, w in self.teacher_source_depths):
            raise ValueError("teacher_edit_share needs teacher sources of depth >= 2 (a depth-1 "
                             "program has no statement to delete)")
        if self.n_examples < 1 or self.teacher_inputs < 1:
            raise ValueError("n_examples and teacher_inputs must be >= 1")


def _draw_task(rng, depth, exclusion: Exclusion) -> Task:
    while True:
        t = sample_task(rng, depth)
        if not exclusion.blocks(t):
            return t


def _draw_pair(rng, s: CorpusSettings, exclusion: Exclusion):
    depths, weights = zip(*s.teacher_source_depths)
    while True:
        src = _draw_task(rng, rng.choices(depths, weights)[0], exclusion)
        axis = rng.choice(("f", "io"))
        direction = "easier" if src.depth > s.harder_max_depth else rng.choice(("easier", "harder"))
        dst = variant(src, axis, direction, rng)
        if dst is not None and not exclusion.blocks(dst):
            return src, dst, axis, direction


def _draw_edit_example(rng, s: CorpusSettings, exclusion: Exclusion) -> str:
    depths, weights = zip(*[(d, w) for d, w in s.teacher_source_depths if d >= 2])
    while True:
        src = _draw_task(rng, rng.choices(depths, weights)[0], exclusion)
        text = edit_description_example(src, rng, s.teacher_inputs, exclusion)
        if text is not None:
            return text


def build_corpus(settings: CorpusSettings, seed: int, exclusion: Exclusion | None = None) -> list[str]:
    """Deterministic for (settings, seed, exclusion): the same texts in the same order."""
    exclusion = exclusion or Exclusion()
    rng = random.Random(f"toyworld-corpus:{seed}")
    kinds = [d for d, _ in settings.student_depth_shares] + ["guide", "teacher"]
    shares = [w for _, w in settings.student_depth_shares] + [settings.guide_share]
    shares.append(max(0.0, 1.0 - sum(shares)))
    g_depths, g_weights = zip(*settings.guide_target_depths)
    texts = []
    for _ in range(settings.n_examples):
        kind = rng.choices(kinds, shares)[0]
        if kind == "teacher" and settings.teacher_edit_share and rng.random() < settings.teacher_edit_share:
            texts.append(_draw_edit_example(rng, settings, exclusion))
        elif kind == "teacher":
            src, dst, axis, direction = _draw_pair(rng, settings, exclusion)
            texts.append(teacher_example(src, dst, axis, direction, rng, settings.teacher_bug_rate,
                                         settings.teacher_inputs, settings.teacher_solution_first))
        elif kind == "guide":
            target = _draw_task(rng, rng.choices(g_depths, g_weights)[0], exclusion)
            texts.append(guide_example(target, rng, exclusion))
        else:
            texts.append(student_example(_draw_task(rng, kind, exclusion), rng, settings.bug_rate))
    return texts


# The teacher phase for a world with a depth-5 pool (`world.deep_pool`): more depth-4 sources,
# and those also made harder, so the teacher has seen the lift a depth-4 lemma needs.
DEEP_TEACHER_SOURCES = ((1, 0.15), (2, 0.3), (3, 0.3), (4, 0.25))
# ... and depth-5 sources as well (made easier only): with DEEP_TEACHER_SOURCES a depth-5 task is
# only ever the target of a lift, and the teacher wrote true d5->4 lemmas for 5 % of held-out
# depth-5 sources. Depth-5 tasks of the pool stay out (the world's exclusion).
DEPTH5_TEACHER_SOURCES = ((1, 0.1), (2, 0.2), (3, 0.2), (4, 0.25), (5, 0.25))
# ... and depth-6 sources (made easier only) for a depth-6 pool (`world.deep_depth` 6): their
# f-axis lemmas are depth-5 programs, so with `completion_start` (the prompt is not a target) no
# pair writes a depth-6 program from a shallower source; only io-axis variants (~6 % of pairs)
# copy a depth-6 program given in the prompt with its input or output representation changed.
DEPTH6_TEACHER_SOURCES = ((1, 0.1), (2, 0.15), (3, 0.15), (4, 0.2), (5, 0.2), (6, 0.2))


def completion_start(text: str) -> int:
    """Where a teacher example's completion starts (after its `### Variant:` line), as a
    character offset; 0 for student and Guide examples. Training only from there teaches the
    teacher to write a variant of a given program without training anyone to write the given
    program from its question — the source is context, as in a prompt-masked SFT."""
    k = text.find(VARIANT_HEADER)
    if k < 0:
        return 0
    end = text.find("\n", k)
    return len(text) if end < 0 else end + 1


def teacher_phase_settings(teacher_share: float, guide_share: float, n_examples: int,
                           deep: bool = False, depth5_sources: bool = False,
                           depth6_sources: bool = False) -> CorpusSettings:
    """The corpus of the bootstrap's teacher phase: `teacher_share` of variant pairs, the Guide's
    share, and the rest student examples in the main corpus's proportions of depths (so the
    student and the Guide are not forgotten while the teacher learns to copy with an edit).
    `deep`: depth-4 sources made harder too (DEEP_TEACHER_SOURCES); `depth5_sources` (with
    `deep`): depth-5 sources made easier as well (DEPTH5_TEACHER_SOURCES); `depth6_sources`:
    depth-5 and depth-6 sources made easier (DEPTH6_TEACHER_SOURCES)."""
    if (depth5_sources or depth6_sources) and not deep:
        raise ValueError("depth-5 or depth-6 teacher sources need the deep teacher phase (deep=True)")
    student = 1.0 - teacher_share - guide_share
    if student < 0 or teacher_share <= 0:
        raise ValueError(f"teacher_share {teacher_share} + guide_share {guide_share} must leave a "
                         "share >= 0 for student examples, and the teacher share must be > 0")
    base = CorpusSettings().student_depth_shares
    total = sum(w for _, w in base)
    sources = (DEPTH6_TEACHER_SOURCES if depth6_sources else
               DEPTH5_TEACHER_SOURCES if depth5_sources else DEEP_TEACHER_SOURCES)
    extra = {"teacher_source_depths": sources, "harder_max_depth": 4} if deep else {}
    return CorpusSettings(n_examples=n_examples, guide_share=guide_share,
                          student_depth_shares=tuple((d, w * student / total) for d, w in base),
                          **extra)
