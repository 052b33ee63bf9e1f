"""Issue 11, classes 5 and 7, in the loop: the proposal gates judge reference programs at run
time in the sandbox (not by reading their source), each rejection counted by reason; and a
harness error is excluded from pass rates and rollouts, counted, and fails the run past a
share. The executor is the real one; the one fault no program can cause (a harness error) is
injected by a thin wrapper, which says so."""

import pytest

from selfplay_core import stages as S
from selfplay_core.config import load_config
from selfplay_core.engines.base import Completion
from selfplay_core.loop import recorder
from selfplay_core.methods.azr import Learnability
from selfplay_core.methods.azr_triplets import TripletRound
from selfplay_core.methods.gasp import BandReward
from selfplay_core.problems import Problem, SampleVerdict, TestCase, Verdict
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.rewards import r_lemma
from selfplay_core.roles.teacher import teacher_completion
from selfplay_core.run_context import RunContext
from selfplay_core.solve import score


def gasp_ctx(executor, *overrides):
    return RunContext(load_config(None, ["teacher.min_inputs=4", *overrides]), executor=executor)


def proposal(i, code, inputs=(1, 2, 3, 4, 5)):
    text = teacher_completion(f"Task number {i}: compute something about x.", code, list(inputs))
    return Proposal("lemma", Anchor("g", "q", "c"), "f", "easier", "", Completion(text), id=f"p{i}")


GASP_CASES = [
    ("def f(x):\n    return x * 3 + 1\n", None),
    # run-time routes to modules outside the allow-list (an import statement was the only
    # route the old source check saw)
    ("def f(x):\n    return __import__('os').getpid() * 0 + x\n", "banned_import"),
    ("import typing\ndef f(x):\n    return len(typing.sys.modules['os'].listdir('/')) + x\n",
     "banned_import"),
    ("import importlib\ndef f(x):\n    return x\n", "banned_import"),
    # nondeterminism the old two-run check let through about half the time
    ("import typing\ndef f(x):\n    return x + int(typing.sys.modules['time'].time() // 3600) % 2\n",
     "nondeterministic"),
    ("def f(x):\n    return x + hash('salt%d' % x) % 3\n", "nondeterministic"),
    ("def f(x):\n    return 1 // (x - 3)\n", "reference_error"),
    ("def f(x):\n    while True:\n        pass\n", "reference_timeout"),
]


def test_gasp_gate_enforces_the_allow_list_at_run_time_and_counts_reasons(executor):
    ctx = gasp_ctx(executor)
    props = [proposal(i, code) for i, (code, _) in enumerate(GASP_CASES)]
    log = IterationLog()
    S.validate(ctx, props, log)
    assert [p.rejection for p in props] == [why for _, why in GASP_CASES]
    assert [t.expected for t in props[0].problem.tests] == [4, 7, 10, 13, 16]
    m = log.metrics
    assert m["rejections/lemma/banned_import"] == 3
    assert m["rejections/lemma/nondeterministic"] == 2
    assert m["rejections/lemma/reference_error"] == 1
    assert m["rejections/lemma/reference_timeout"] == 1
    assert m["teacher/lemma/accepted"] == 1


def test_the_gate_works_with_a_single_worker_executor():
    # The two determinism runs used to land in the same process when workers=1.
    from selfplay_core.sandbox import Executor, SandboxConfig
    with Executor(SandboxConfig(workers=1)) as ex:
        props = [proposal(0, "def f(x):\n    return hash(str(x)) % 97\n")]
        S.validate(gasp_ctx(ex), props, IterationLog())
    assert props[0].rejection == "nondeterministic"


def triplet(i, code, inp):
    text = f"### Program\n{code}### Input\n{inp}\n### End"
    return Proposal("azr_abduction", Anchor("azr-seed", "", ""), "", "propose", "",
                    Completion(text), id=f"t{i}")


def test_a_triplet_is_probed_on_other_inputs_too(executor):
    # Abduction validation used to run the proposed input only: a program deterministic on it
    # but not on inputs a student might try is caught on the batch-mates' inputs.
    cfg = load_config(None, ["method=azr", "method.task_types=[abduction]"])
    ctx = RunContext(cfg, executor=executor)
    sneaky = "def f(x):\n    return x if len(x) < 4 else [id(object())]\n"
    props = [triplet(0, sneaky, "[1, 2]"),
             triplet(1, "def f(x):\n    return sorted(x, reverse=True)\n", "[5, 1, 4, 2, 3]"),
             triplet(2, "def f(x):\n    return x + __import__('os').getcwd()\n", "'a'")]
    log = IterationLog()
    TripletRound("abduction", len(props), cfg.method, Learnability(-0.5)).validate(ctx, props, log)
    assert [p.rejection for p in props] == ["nondeterministic", None, "banned_import"]


# ---- class 7: harness errors ------------------------------------------------------------------

class HarnessFaults:
    """The real executor, except that the listed sample ids come back as harness errors:
    a fault injection (no program can cause one, which is the point of class 3)."""

    def __init__(self, executor, fail_ids):
        self.executor, self.fail_ids = executor, set(fail_ids)
        self.stats = executor.stats

    def verify(self, items, **kw):
        out = self.executor.verify(items, **kw)
        for k, ((p, s), v) in enumerate(zip(items, out)):
            if (p.id, s.sample_id) in self.fail_ids:
                out[k] = SampleVerdict(p.id, s.sample_id, Verdict.harness_error, [], 0.0, "injected")
        return out

    def __getattr__(self, name):
        return getattr(self.executor, name)


def task(pid):
    return Problem(id=pid, kind="call", entry_point="f", time_limit_s=1.0,
                   tests=[TestCase(args=[x], expected=2 * x) for x in (1, 2, 3)],
                   metadata={"signature": "def f(x):"})


GOOD = "def f(x):\n    return 2 * x\n"
BAD = "def f(x):\n    return x\n"


def completions(codes):
    return [Completion(f"```python\n{c}```", token_ids=[1, 2], logprobs=[-0.1, -0.2],
                       prompt_token_ids=[0]) for c in codes]


def test_harness_errors_leave_pass_rates_and_rollouts(executor):
    probs = [task("a"), task("b")]
    comps = [completions([GOOD, BAD, GOOD, GOOD]), completions([GOOD, GOOD])]
    faulty = HarnessFaults(executor, {("a", 1), ("a", 2), ("b", 0), ("b", 1)})
    ra, rb = score(faulty, probs, comps)
    # a: sample 1 (wrong) and sample 2 (right) have no verdict of the model's own
    assert (ra.n, ra.c, ra.harness_errors) == (2, 2, 2)
    assert ra.rejections[1] == "harness_error"
    assert [ok for _, ok in ra.scored()] == [True, True]
    assert (rb.n, rb.c) == (0, 0)

    # the pass rate of a proposal counts judged samples only; one with none drops out
    props = []
    for r in (ra, rb):
        p = Proposal("lemma", Anchor("g", "q", "c"), "f", "easier", "", completions([GOOD])[0],
                     id=r.problem.id)
        p.problem = r.problem
        assert S.has_pass_rate(p, r) == (r.n > 0)
        if p.accepted:
            p.solve, p.pass_rate = r, r.c / r.n
        props.append(p)
    assert props[0].pass_rate == 1.0
    assert props[1].rejection == "harness_error" and not props[1].accepted
    ctx = RunContext(load_config(None, []))
    S.score(ctx, props, BandReward((0.3, 0.7), -0.5, r_lemma), IterationLog())
    assert props[1].reward is None  # not scored: the sandbox failed, not the teacher


def test_the_run_fails_past_the_harness_error_share():
    cfg = load_config(None, ["sandbox.max_harness_error_share=0.1"])
    log = IterationLog()
    before = {"jobs": 100, "harness_errors": 1, "harness_retries": 2}
    recorder.harness_errors(cfg, {"jobs": 200, "harness_errors": 4, "harness_retries": 9}, before, log, 1)
    assert log.metrics["harness_errors"] == 3 and log.metrics["harness_retries"] == 7
    with pytest.raises(recorder.HarnessFailure, match="harness error"):
        recorder.harness_errors(cfg, {"jobs": 120, "harness_errors": 4}, {"jobs": 100, "harness_errors": 0},
                               IterationLog(), 2)
    # a couple of errors in a small iteration are excluded and counted, not fatal
    recorder.harness_errors(cfg, {"jobs": 10, "harness_errors": 2}, {"jobs": 0, "harness_errors": 0},
                           IterationLog(), 3)


# ---- classes 5 and 7 through one whole GASP iteration ----------------------------------------

class Faults(HarnessFaults):
    """HarnessFaults, and reference checks of the listed problem ids come back as harness errors
    too (fault injection, as above)."""

    def __init__(self, executor, fail_ids, fail_references):
        super().__init__(executor, fail_ids)
        self.fail_references = set(fail_references)

    def check_references(self, items, **kw):
        from selfplay_core.sandbox.executor import ReferenceCheck
        out = self.executor.check_references(items, **kw)
        return [ReferenceCheck(None, "harness_error", "injected") if p.id in self.fail_references
                else c for (p, _), c in zip(items, out)]


class Scripted:
    """An engine that answers teacher prompts from a queue (one list of proposals per call) and
    student prompts by the task's question (one list of programs, one per sample)."""

    def __init__(self, teacher_calls, student):
        self.teacher_calls, self.student = list(teacher_calls), student

    def generate(self, prompts, n, sampling):
        from selfplay_core.roles.teacher import END_HEADER
        if END_HEADER in sampling.stop:   # the teacher's stop strings
            texts = self.teacher_calls.pop(0)
            assert len(prompts) == 1 and len(texts) == n
            return [completions_text(texts)]
        out = []
        for p in prompts:
            codes = next(v for q, v in self.student.items() if q in p)
            assert len(codes) == n
            out.append(completions(codes))
        return out


def completions_text(texts):
    return [Completion(t, token_ids=[1, 2], logprobs=[-0.1, -0.2], prompt_token_ids=[0]) for t in texts]


class RecordingLearner:
    """Stands in for the learner (not under test): keeps what an update would train on."""

    unwrapped = None

    def __init__(self):
        self.seen = []

    def update(self, rollouts, epochs=1):  # the update stage's call (rl.learner.Learner.update)
        for _ in range(epochs):
            self.seen.append(list(rollouts))
        return {}


def body(code):
    return "\n".join(code.splitlines()[1:]) + "\n"   # the student writes the function's body


def test_one_gasp_iteration_with_harness_faults_and_sneaky_references(executor):
    from selfplay_core.methods.gasp import GASP
    from selfplay_core.rewards import r_lift

    cfg = load_config(None, ["teacher.min_inputs=4", "method.goalposts_per_iteration=1",
                             "method.proposals_per_anchor=3", "student.samples_per_task=4",
                             "student.train_band=[0.0, 1.0]", "updates_per_iteration=1"])
    gp = Problem(id="gp", kind="call", entry_point="f", prompt="Add one to x.",
                 tests=[TestCase(args=[1], expected=2)],
                 metadata={"reference": "def f(x):\n    return x + 1\n", "signature": "def f(x):"})
    triple, double, negate = ("def f(x):\n    return 3 * x\n", "def f(x):\n    return 2 * x\n",
                              "def f(x):\n    return -x\n")
    lemmas = [teacher_completion("Triple the number x.", triple, [1, 2, 3, 4, 5]),
              teacher_completion("Double the number x.", double, [1, 2, 3, 4, 5]),
              teacher_completion("Negate the number x.", negate, [1, 2, 3, 4, 5])]
    square = "def f(x):\n    return x * x\n"
    lifts = [teacher_completion("Square the number x.", square, [1, 2, 3, 4, 5]),
             # class 5: a module outside the allow-list reached at run time, no import statement
             teacher_completion("Cube x, quietly.",
                                "def f(x):\n    b = __builtins__ if isinstance(__builtins__, dict) "
                                "else vars(__builtins__)\n    return x ** 3 + "
                                "len(b['__import__']('subprocess').__name__) * 0\n", [1, 2, 3, 4, 5]),
             # class 5: deterministic within one process, not across two (hash seeds differ)
             teacher_completion("Mix x.", "def f(x):\n    return x + hash(str(x)) % 5\n",
                                [1, 2, 3, 4, 5])]
    wrong = "def f(x):\n    return x\n"
    engine = Scripted([lemmas, lifts], {
        "Triple the number x.": [body(triple), body(wrong), body(triple), body(wrong)],
        "Double the number x.": [body(double)] * 4,
        "Square the number x.": [body(square), body(wrong), body(wrong), body(wrong)]})
    learner = RecordingLearner()
    ctx = RunContext(cfg, engine=engine, learner=learner, goalposts=[gp])
    # Proposal ids are it0/<kind>/<n> in proposal order: lemmas 1-3, lifts 4-6.
    ex = Faults(executor, fail_ids={("it0/lemma/1", 0), ("it0/lemma/1", 1),      # a right, a wrong
                                    *(("it0/lemma/2", j) for j in range(4))},    # all of double's
                fail_references={"it0/lemma/3"})                                 # negate's check
    ctx.executor = ex
    log = IterationLog()
    method, made = GASP(cfg.method), []
    hook = method.rollouts
    method.rollouts = lambda *a: made.append(hook(*a)) or made[-1]   # what the update stage got
    done, student = method.run_iteration(ctx, log, lambda name, fn, *a: fn(*a))
    by_id = {p.id: p for p in done}
    tri, dbl, neg = by_id["it0/lemma/1"], by_id["it0/lemma/2"], by_id["it0/lemma/3"]
    sq, cube, mix = by_id["it0/lift/4"], by_id["it0/lift/5"], by_id["it0/lift/6"]

    # triple: p over the two judged samples (one right, one wrong), not 1/4
    assert (tri.solve.n, tri.solve.c, tri.pass_rate) == (2, 1, 0.5)
    assert tri.reward == r_lemma(0.5, band=cfg.method.lemma_band, out_of_band=cfg.method.out_of_band)
    # double: no sample judged, so no p: out of the task set, no reward, not buffered
    assert (dbl.rejection, dbl.reward, dbl.solve) == ("harness_error", None, None)
    # negate: its reference check failed in the sandbox, which is not the teacher's doing
    assert (neg.rejection, neg.reward) == ("harness_error", None)
    assert log.metrics["rejections/lemma/harness_error"] == 1
    # the lift round: anchored on triple (the one accepted lemma); the sneaky ones are rejected
    assert [p.anchor.id for p in (sq, cube, mix)] == ["it0/lemma/1"] * 3
    assert (cube.rejection, mix.rejection) == ("banned_import", "nondeterministic")
    assert cube.reward == mix.reward == cfg.teacher.invalid_penalty
    assert log.metrics["rejections/lift/banned_import"] == 1
    assert log.metrics["rejections/lift/nondeterministic"] == 1
    assert (sq.pass_rate, sq.reward) == (0.25, r_lift(0.25, band=cfg.method.lift_band,
                                                      out_of_band=cfg.method.out_of_band))
    # the buffer holds the judged, accepted tasks only
    assert sorted(b.id for b in ctx.buffers) == ["it0/lemma/1", "it0/lift/4"]
    # the update's rollouts: one per judged proposal (role teacher), one per judged sample
    # (role student: 2 of triple's, 4 of square's); nothing of double or negate
    (seen,) = made
    assert learner.seen and all(r in seen for r in learner.seen[0])
    teacher_groups = sorted(r.meta["group"] for r in seen if r.role == "teacher")
    assert teacher_groups == sorted(["it0/lemma/1", "it0/lift/4", "it0/lift/5", "it0/lift/6"])
    student_groups = [r.meta["group"] for r in seen if r.role == "student"]
    assert sorted(student_groups) == ["it0/lemma/1"] * 2 + ["it0/lift/4"] * 4
    assert [r.meta["passed"] for r in seen if r.meta["group"] == "it0/lemma/1"
            and r.role == "student"] == [True, False]
