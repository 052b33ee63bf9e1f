"""Toy-world tasks: a typed chain of primitives between an input and an output representation.

A task renders to a templated English description and a reference program `def f(x): ...`;
sampling inputs and running the (trusted, self-generated) reference in-process gives the expected
outputs of an ordinary `Problem`, which the ordinary executor then verifies samples against.

Difficulty is the composition depth: the number of primitive steps. Representation adapters (the
io axis) add a line but not depth: they change how data is written, not the algorithm.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Any, Callable

from selfplay_core.problems import Problem, TestCase
from selfplay_core.toyworld.primitives import LETTERS, PRIMITIVES, redundant


@dataclass(frozen=True)
class InRep:
    name: str
    base: str                       # the type the algorithm works on
    text: str                       # how the description introduces the input
    adapter: str | None             # line converting the representation to `base`
    encode: Callable[[Any], Any]    # base value -> value in this representation


@dataclass(frozen=True)
class OutRep:
    name: str
    base: str
    text: str                       # sentence appended to the description ("" when native)
    adapter: str | None


def _ident(v):
    return v


IN_REPS: dict[str, InRep] = {r.name: r for r in [
    InRep("ints", "ints", "Given a list of numbers", None, _ident),
    InRep("ints_csv", "ints", "Given a string of comma-separated numbers",
          "x = [int(t) for t in x.split(',') if t]", lambda v: ",".join(str(a) for a in v)),
    InRep("ints_pairs", "ints", "Given a list of (index, number) pairs",
          "x = [v for i, v in x]", lambda v: [(i, a) for i, a in enumerate(v)]),
    InRep("int", "int", "Given a number", None, _ident),
    InRep("int_str", "int", "Given a number written as a string", "x = int(x)", str),
    InRep("str", "str", "Given a string", None, _ident),
    InRep("str_chars", "str", "Given a list of letters", "x = ''.join(x)", list),
]}

OUT_REPS: dict[str, OutRep] = {r.name: r for r in [
    OutRep("ints", "ints", "", None),
    OutRep("ints_csv", "ints", "Return the numbers as a comma-separated string.",
           "x = ','.join(str(v) for v in x)"),
    OutRep("int", "int", "", None),
    OutRep("int_str", "int", "Return it as a string.", "x = str(x)"),
    OutRep("str", "str", "", None),
    OutRep("str_chars", "str", "Return the list of its letters.", "x = list(x)"),
]}

NATIVE = {"ints": "ints", "int": "int", "str": "str"}
SIGNATURE = "def f(x):"
ENTRY_POINT = "f"

Step = tuple  # (primitive name, constant or None)


class TaskError(ValueError):
    """A task whose parts do not fit together (unknown name, type mismatch)."""


@dataclass(frozen=True)
class Task:
    in_rep: str
    steps: tuple[Step, ...]
    out_rep: str

    def __post_init__(self):
        if self.in_rep not in IN_REPS:
            raise TaskError(f"unknown input representation {self.in_rep!r}")
        if self.out_rep not in OUT_REPS:
            raise TaskError(f"unknown output representation {self.out_rep!r}")
        if not self.steps:
            raise TaskError("a task needs at least one step")
        t = IN_REPS[self.in_rep].base
        for name, c in self.steps:
            p = PRIMITIVES.get(name)
            if p is None:
                raise TaskError(f"unknown primitive {name!r}")
            if p.in_type != t:
                raise TaskError(f"step {name!r} takes {p.in_type}, but the value is {t}")
            if p.has_const != (c is not None) or (c is not None and c not in p.consts):
                raise TaskError(f"step {name!r}: bad constant {c!r}")
            t = p.out_type
        if OUT_REPS[self.out_rep].base != t:
            raise TaskError(f"output representation {self.out_rep!r} does not fit type {t}")

    # -- rendering ------------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self.steps)

    @property
    def out_type(self) -> str:
        return PRIMITIVES[self.steps[-1][0]].out_type

    @property
    def key(self) -> str:
        steps = ",".join(n if c is None else f"{n}:{c}" for n, c in self.steps)
        return f"{self.in_rep}|{steps}|{self.out_rep}"

    @property
    def algorithm_key(self) -> str:
        return self.key.split("|")[1]

    def description(self) -> str:
        phrases = [PRIMITIVES[n].phrase(c) for n, c in self.steps]
        text = f"{IN_REPS[self.in_rep].text}, " + ", then ".join(phrases) + "."
        out = OUT_REPS[self.out_rep].text
        return f"{text} {out}" if out else text

    def step_lines(self, steps=None) -> list[str]:
        return [PRIMITIVES[n].line(c) for n, c in (steps or self.steps)]

    def body_lines(self, steps=None) -> list[str]:
        lines = []
        if IN_REPS[self.in_rep].adapter:
            lines.append(IN_REPS[self.in_rep].adapter)
        lines += self.step_lines(steps)
        if OUT_REPS[self.out_rep].adapter:
            lines.append(OUT_REPS[self.out_rep].adapter)
        lines.append("return x")
        return lines

    def program(self, steps=None) -> str:
        return SIGNATURE + "\n" + "".join(f"    {ln}\n" for ln in self.body_lines(steps))

    # -- running the trusted reference ------------------------------------------------------------
    def function(self) -> Callable:
        return _compiled(self.program())

    def sample_inputs(self, rng: random.Random, n: int) -> list:
        """n inputs in this task's input representation; the first are edge cases."""
        base = IN_REPS[self.in_rep].base
        vals = [sample_base_value(base, rng, edge=i) for i in range(n)]
        enc = IN_REPS[self.in_rep].encode
        return [enc(v) for v in vals]


@functools.lru_cache(maxsize=65536)
def _compiled(program: str) -> Callable:
    ns: dict = {}
    exec(compile(program, "<toy>", "exec"), ns)  # our own generated code, never a model's
    return ns[ENTRY_POINT]


def sample_base_value(base: str, rng: random.Random, edge: int = 99):
    if base == "ints":
        if edge == 0:
            return []
        if edge == 1:
            return [rng.randint(0, 19)]
        n = rng.randint(2, 6)
        return [rng.randint(-9, -1) if rng.random() < 0.12 else rng.randint(0, 19) for _ in range(n)]
    if base == "int":
        if edge == 0:
            return 0
        return rng.randint(-20, -1) if rng.random() < 0.15 else rng.randint(1, 999)
    if base == "str":
        if edge == 0:
            return ""
        return "".join(rng.choice(LETTERS) for _ in range(rng.randint(1, 7)))
    raise TaskError(f"unknown base type {base!r}")


def is_redundant(steps) -> bool:
    return any(redundant(a[0], b[0]) for a, b in zip(steps, steps[1:]))


# -- sampling ---------------------------------------------------------------------------------------
BASE_WEIGHTS = {"ints": 0.6, "str": 0.25, "int": 0.15}
IN_REP_NATIVE_P = 0.6
OUT_REP_NATIVE_P = 0.7


def sample_step(rng: random.Random, t: str, prev: str | None = None) -> Step | None:
    cands = [p for p in PRIMITIVES.values() if p.in_type == t and not (prev and redundant(prev, p.name))]
    if not cands:
        return None
    p = rng.choice(cands)
    return (p.name, rng.choice(p.consts) if p.has_const else None)


def sample_reps(rng: random.Random, base_in: str, base_out: str) -> tuple[str, str]:
    ins = [r.name for r in IN_REPS.values() if r.base == base_in]
    outs = [r.name for r in OUT_REPS.values() if r.base == base_out]
    in_rep = NATIVE[base_in] if rng.random() < IN_REP_NATIVE_P else rng.choice(ins[1:])
    out_rep = NATIVE[base_out] if rng.random() < OUT_REP_NATIVE_P else rng.choice(outs[1:])
    return in_rep, out_rep


def sample_task(rng: random.Random, depth: int, tries: int = 200) -> Task:
    """A random non-degenerate task of the given depth."""
    if depth < 1:
        raise TaskError("depth must be >= 1")
    for _ in range(tries):
        base = rng.choices(list(BASE_WEIGHTS), weights=list(BASE_WEIGHTS.values()))[0]
        steps, t, prev = [], base, None
        for _ in range(depth):
            s = sample_step(rng, t, prev)
            if s is None:
                break
            steps.append(s)
            prev, t = s[0], PRIMITIVES[s[0]].out_type
        if len(steps) != depth:
            continue
        in_rep, out_rep = sample_reps(rng, base, t)
        task = Task(in_rep, tuple(steps), out_rep)
        if not degenerate(task):
            return task
    raise TaskError(f"could not sample a non-degenerate task of depth {depth}")


_PROBE_SEED = 1234


def _outputs(task: Task, inputs: list) -> list[str] | None:
    fn = task.function()
    try:
        return [repr(fn(v)) for v in inputs]
    except Exception:
        return None


@functools.lru_cache(maxsize=65536)
def degenerate(task: Task, n: int = 12) -> bool:
    """True when the task cannot tell a right program from a wrong one or overstates its depth:
    the program fails, its output barely depends on the input, or some step can be dropped
    without changing behaviour (e.g. sorting before a sum)."""
    rng = random.Random(f"{_PROBE_SEED}:{task.key}")
    inputs = task.sample_inputs(rng, n)
    outs = _outputs(task, inputs)
    if outs is None or len(set(outs)) < max(3, n // 3):
        return True
    for i in range(task.depth):
        if task.depth == 1:
            break
        try:
            shorter = Task(task.in_rep, task.steps[:i] + task.steps[i + 1:], task.out_rep)
        except TaskError:
            continue
        if _outputs(shorter, inputs) == outs:
            return True
    return False


def make_problem(task: Task, problem_id: str, rng: random.Random, n_tests: int = 8,
                 metadata: dict | None = None) -> Problem:
    """An ordinary call-kind Problem whose expected values come from the reference program."""
    fn = task.function()
    inputs, seen = [], set()
    for v in task.sample_inputs(rng, n_tests * 3):
        r = repr(v)
        if r not in seen:
            seen.add(r)
            inputs.append(v)
        if len(inputs) == n_tests:
            break
    tests = [TestCase(args=[v], expected=fn(v)) for v in inputs]
    meta = {"depth": task.depth, "key": task.key, "in_rep": task.in_rep, "out_rep": task.out_rep,
            "reference": task.program(), "signature": SIGNATURE}
    meta.update(metadata or {})
    return Problem(id=problem_id, kind="call", entry_point=ENTRY_POINT, tests=tests,
                   time_limit_s=1.0, memory_limit_mb=256, prompt=task.description(),
                   metadata=meta)


def task_from_key(key: str) -> Task:
    """Inverse of `Task.key`."""
    try:
        in_rep, steps_s, out_rep = key.split("|")
        steps = []
        for part in steps_s.split(","):
            name, _, c = part.partition(":")
            if c:
                consts = PRIMITIVES[name].consts if name in PRIMITIVES else ()
                c = c if any(isinstance(k, str) for k in consts) else int(c)
            steps.append((name, c if c != "" else None))
        return Task(in_rep, tuple(steps), out_rep)
    except (ValueError, KeyError) as e:
        raise TaskError(f"bad task key {key!r}: {e}") from None
