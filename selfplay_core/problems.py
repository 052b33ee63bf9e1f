"""Plain, JSON-serializable records shared by every part of the pipeline.

A `Problem` is what the executor verifies against: a test kind, an entry point and test cases
whose expected values are held by the trusted parent only. A `Sample` is untrusted code.
`SampleVerdict` is what comes back. Values inside tests use the executor's tagged JSON encoding
(`selfplay_core.values`), so tuples, sets and non-string dict keys survive a file.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from selfplay_core.values import from_json_obj, to_json_obj


class Verdict(str, enum.Enum):
    passed = "passed"
    wrong_answer = "wrong_answer"
    runtime_error = "runtime_error"
    timeout = "timeout"
    memory_limit = "memory_limit"
    compile_error = "compile_error"
    output_limit = "output_limit"
    harness_error = "harness_error"

    def __str__(self) -> str:  # print as the bare name
        return self.value


KINDS = ("call", "stdin")

# Comparison rules beyond plain value equality (see selfplay_core.sandbox.compare).
ORACLES = (
    "default",
    "poly_root",        # HumanEval/32 find_zero: |poly(xs, out)| <= atol
    "set_eq",           # MBPP+ tasks whose output order is unspecified
    "not_none",         # MBPP+ tasks checked only for "returns something"
    "mbpp_surface_area",  # Mbpp/581: the canonical answer or evalplus's corrected one
    "mbpp_digit_distance",  # Mbpp/558: likewise
    "sum_div_or_zero",  # Mbpp/295
    "always",           # Mbpp/164: any output is accepted
)


@dataclass
class TestCase:
    """One test. `args` for call tests, `stdin` for stdin tests; `expected` may be unknown
    (None with `has_expected=False`) until a reference program has produced it."""

    __test__ = False  # not a pytest test class

    args: list | None = None
    stdin: str | None = None
    expected: Any = None
    has_expected: bool = True

    def to_json(self) -> dict:
        d: dict[str, Any] = {}
        if self.stdin is not None:
            d["stdin"] = self.stdin
        else:
            d["args"] = to_json_obj(list(self.args or []))
        if self.has_expected:
            d["expected"] = self.expected if self.stdin is not None else to_json_obj(self.expected)
        return d


@dataclass
class Problem:
    id: str
    kind: str
    tests: list[TestCase]
    entry_point: str | None = None
    time_limit_s: float = 2.0
    memory_limit_mb: int = 1024
    atol: float = 0.0
    oracle: str = "default"
    prompt: str | None = None
    metadata: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        d = {
            "id": self.id,
            "kind": self.kind,
            "entry_point": self.entry_point,
            "tests": [t.to_json() for t in self.tests],
            "time_limit_s": self.time_limit_s,
            "memory_limit_mb": self.memory_limit_mb,
            "atol": self.atol,
        }
        if self.oracle != "default":
            d["oracle"] = self.oracle
        if self.prompt is not None:
            d["prompt"] = self.prompt
        if self.metadata:
            d["metadata"] = self.metadata
        return d

    def dumps(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False)


@dataclass
class Sample:
    problem_id: str
    sample_id: str | int
    code: str


@dataclass
class TestResult:
    verdict: Verdict
    time_s: float = 0.0            # wall seconds, measured by the sandbox worker
    detail: str | None = None
    cpu_s: float | None = None     # CPU seconds: what time limits are enforced on

    def to_json(self) -> dict:
        d = {"verdict": self.verdict.value, "time_s": round(self.time_s, 6)}
        if self.cpu_s is not None:
            d["cpu_s"] = round(self.cpu_s, 6)
        if self.detail:
            d["detail"] = self.detail
        return d


@dataclass
class SampleVerdict:
    problem_id: str
    sample_id: str | int
    verdict: Verdict
    tests: list[TestResult]
    time_s: float
    detail: str | None = None

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.passed

    def to_json(self) -> dict:
        d = {
            "problem_id": self.problem_id,
            "sample_id": self.sample_id,
            "verdict": self.verdict.value,
            "tests": [t.to_json() for t in self.tests],
            "time_s": round(self.time_s, 6),
        }
        if self.detail:
            d["detail"] = self.detail
        return d


# ------------------------------------------------------------------------------------------------
# JSONL I/O with one clear error per bad row (file, line, field) instead of a traceback.
# ------------------------------------------------------------------------------------------------

class InputError(ValueError):
    """A malformed input file. The message names the file, line and field."""


def _fail(path, lineno, msg):
    raise InputError(f"{path}:{lineno}: {msg}")


def _jsonl_rows(path):
    """(line number, object) per non-empty line. A gzip file (evalplus ships .jsonl.gz) is read
    as its text; bytes that are not UTF-8 are one InputError naming the line, not a traceback."""
    import gzip
    import os
    if not os.path.exists(path):
        raise InputError(f"{path}: file not found")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a folder; give a JSONL file")
    lineno = 0
    try:
        with open(path, "rb") as f:   # bytes, decoded per line: an error names its line
            if f.peek(2)[:2] == b"\x1f\x8b":
                f = gzip.GzipFile(fileobj=f)
            for lineno, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    _fail(path, lineno, "not UTF-8 text; give a JSONL file (plain or gzip-compressed)")
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as e:
                    _fail(path, lineno, f"not valid JSON ({e.msg} at column {e.colno})")
                if not isinstance(row, dict):
                    _fail(path, lineno, f"expected a JSON object, got {type(row).__name__}")
                yield lineno, row
    except (OSError, EOFError) as e:   # a truncated or corrupt gzip file
        _fail(path, lineno + 1, f"cannot be read ({e}); give a JSONL file (plain or gzip-compressed)")


def problem_from_json(row: dict, where: str = "problem") -> Problem:
    """Build a Problem from a row of the problems JSONL contract; raises InputError."""
    def need(key, types, default=...):
        if key not in row:
            if default is ...:
                raise InputError(f"{where}: missing field '{key}'")
            return default
        v = row[key]
        if isinstance(v, bool) or not isinstance(v, types):
            raise InputError(f"{where}: field '{key}' has type {type(v).__name__}")
        return v

    if "id" not in row and "task_id" in row:   # a HumanEval+/MBPP+ row, not yet converted
        raise InputError(f"{where}: missing field 'id' (a benchmark dataset row: write the problems "
                         "file with `selfplay convert humanevalplus|mbppplus --out PROBLEMS.jsonl`)")
    pid = need("id", (str, int))
    kind = need("kind", str)
    if kind not in KINDS:
        raise InputError(f"{where}: field 'kind' must be 'call' or 'stdin', got {kind!r}")
    entry = need("entry_point", (str, type(None)), None)
    if kind == "call" and not entry:
        raise InputError(f"{where}: field 'entry_point' is required for call problems "
                         "(a function name like 'f' or 'Solution.method')")
    tests_raw = need("tests", list)
    tests = []
    for j, t in enumerate(tests_raw):
        if not isinstance(t, dict):
            raise InputError(f"{where}: field 'tests[{j}]' must be an object")
        has_exp = "expected" in t
        if kind == "call":
            if not isinstance(t.get("args"), list):
                raise InputError(f"{where}: field 'tests[{j}].args' must be a list of arguments")
            tests.append(TestCase(args=from_json_obj(t["args"]),
                                  expected=from_json_obj(t.get("expected")), has_expected=has_exp))
        else:
            if not isinstance(t.get("stdin"), str):
                raise InputError(f"{where}: field 'tests[{j}].stdin' must be a string")
            if has_exp and not isinstance(t["expected"], str):
                raise InputError(f"{where}: field 'tests[{j}].expected' must be a string for stdin tests")
            tests.append(TestCase(stdin=t["stdin"], expected=t.get("expected"), has_expected=has_exp))
    tl = need("time_limit_s", (int, float), 2.0)
    mem = need("memory_limit_mb", int, 1024)
    atol = need("atol", (int, float), 0.0)
    oracle = need("oracle", str, "default")
    if tl <= 0:
        raise InputError(f"{where}: field 'time_limit_s' must be > 0")
    if mem < 16:
        raise InputError(f"{where}: field 'memory_limit_mb' must be >= 16")
    if oracle not in ORACLES:
        raise InputError(f"{where}: field 'oracle' must be one of {', '.join(ORACLES)}")
    return Problem(id=str(pid), kind=kind, tests=tests, entry_point=entry, time_limit_s=float(tl),
                   memory_limit_mb=mem, atol=float(atol), oracle=oracle,
                   prompt=row.get("prompt"), metadata=row.get("metadata") or {})


def load_problems(path) -> dict[str, Problem]:
    problems: dict[str, Problem] = {}
    for lineno, row in _jsonl_rows(path):
        p = problem_from_json(row, where=f"{path}:{lineno}")
        if p.id in problems:
            _fail(path, lineno, f"field 'id': duplicate problem id {p.id!r}")
        problems[p.id] = p
    return problems


def load_samples(path) -> list[Sample]:
    out = []
    for lineno, row in _jsonl_rows(path):
        for key, types in (("problem_id", (str, int)), ("sample_id", (str, int)), ("code", str)):
            if key not in row:
                _fail(path, lineno, f"missing field '{key}'")
            if not isinstance(row[key], types) or isinstance(row[key], bool):
                _fail(path, lineno, f"field '{key}' has type {type(row[key]).__name__}")
        out.append(Sample(str(row["problem_id"]), row["sample_id"], row["code"]))
    return out


def write_jsonl(path, rows) -> None:
    """Write rows atomically (temp file + rename), so a crash never leaves half a file."""
    from selfplay_core.storage.files import atomic_path

    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
