"""The original HumanEval (OpenAI) and MBPP sanitized (Google) as executor `Problem`s.

Their tests are assert statements. `asserts.py` reads them statically into call tests whose
expected values stay in the trusted parent. Eight HumanEval checks cannot be read that way
(loops over random inputs, helper calls, tuple() wrappers: HumanEval/32, 33, 37, 38, 44, 50,
53, 151); for those we run the check once in the sandbox with the canonical solution as
`candidate`, wrapped so that every call's arguments and result are recorded, and use the
recorded pairs as tests (the random module is seeded, so the inputs are fixed and the content
hash is stable). This is how evalplus
obtained HumanEval's base inputs; the expected values are the canonical outputs, which the
original asserts accept (the canonical solutions pass 164/164). The recordings are cached, keyed
by the data file's hash. An MBPP task with an unreadable assert is skipped with a reason.

Time limits follow the one rule in `limits.py` (evalplus's: max(1 s, 4 x the reference's
slowest test), in CPU seconds): the reference runs on every task at first load (also cached),
which doubles as a check of the extraction: a test the reference itself fails with a wrong
answer or an error in every run is dropped and counted, never scored. A timeout or a harness
error depends on the machine, not the data: it is retried, never cached, and an error if it
persists.
"""

from __future__ import annotations

import ast
import json
import warnings
from pathlib import Path

from selfplay_core.datasets.asserts import AssertCase, Unsupported, cases_from_statements, name_is
from selfplay_core.datasets.benchmark import BenchmarkSet, Skipped
from selfplay_core.datasets.evalplus import MEMORY_LIMIT_MB, _read_jsonl_gz, data_root, file_sha256
from selfplay_core.datasets.expected import cache_dir
from selfplay_core.datasets.limits import MIN_TIME_LIMIT_S, time_limit_from_reference
from selfplay_core.problems import InputError, Problem, TestCase
from selfplay_core.sandbox import Executor, Sample, SandboxConfig
from selfplay_core.storage.files import atomic_write_text
from selfplay_core.values import from_json_obj, to_json_obj

CALIBRATION_LIMIT_S = 60.0
CALIBRATION_RETRIES = 2
_RECORD_SEED = 20240801
_CACHE_FORMAT = "2"
# evalplus's not-None oracle for MBPP tasks whose reference returns a match object or None.
_MBPP_NOT_NONE = {"check_str", "text_match_three", "text_starta_endb"}

_KNOWN = {
    "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef":
        "openai/human-eval 463c980 (164 tasks)",
    "ca95deaa9a01ef0a6f439f88bcf0dd3db3563d22f22aad6cae04ebb9a8d8c8e9":
        "google-research mbpp sanitized (427 tasks)",
}


def _oracle_and_atol(cases: list[AssertCase], entry: str, task: str) -> tuple[str, float]:
    kinds = {c.kind for c in cases}
    # The executor takes one absolute tolerance per problem. Asserts give one per call
    # (math.isclose's rel_tol scales with the value), so we take the strictest: never more
    # lenient than the original on any test, possibly stricter on the larger values.
    atol = min((c.atol for c in cases if c.atol > 0), default=0.0)
    if kinds == {"set_eq"}:
        return "set_eq", atol
    if "set_eq" in kinds:
        raise Unsupported("mixes set-equality asserts with other asserts")
    if entry in _MBPP_NOT_NONE and task.startswith("Mbpp/"):
        return "not_none", atol
    return "default", atol


def _problem_from_cases(tid, entry, cases, prompt, meta, oracle=None, atol=None) -> Problem:
    o, a = _oracle_and_atol(cases, entry, tid)
    return Problem(
        id=tid, kind="call", entry_point=entry,
        tests=[TestCase(args=list(c.args), expected=c.expected) for c in cases],
        time_limit_s=MIN_TIME_LIMIT_S, memory_limit_mb=MEMORY_LIMIT_MB,
        atol=a if atol is None else atol, oracle=o if oracle is None else oracle,
        prompt=prompt, metadata=meta,
    )


# ------------------------------------------------------------------------------------------------
# HumanEval
# ------------------------------------------------------------------------------------------------

def _check_function(test_src: str, where: str) -> ast.FunctionDef:
    try:
        mod = ast.parse(test_src)
    except SyntaxError as e:
        raise InputError(f"{where}: field 'test' does not parse ({e.msg}, line {e.lineno})") from None
    for node in mod.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            if len(node.args.args) != 1:
                raise InputError(f"{where}: field 'test': check() must take one argument")
            return node
    raise InputError(f"{where}: field 'test' defines no check(candidate)")


_RECORDER = '''

def __selfplay_record__():
    import copy, random
    random.seed({seed})
    calls = []
    real = {entry}
    def candidate(*args):
        frozen = copy.deepcopy(list(args))
        out = real(*args)
        calls.append((frozen, out))
        return out
    check(candidate)
    return calls
'''


def _record_calls(todo: dict[str, tuple[str, str]], executor) -> dict[str, list]:
    """Run each check once with a recording candidate; {task: [[args, output], ...]}."""
    items = []
    for tid, (program, entry) in todo.items():
        probe = Problem(id=tid, kind="call", entry_point="__selfplay_record__",
                        tests=[TestCase(args=[], has_expected=False)], time_limit_s=120.0,
                        memory_limit_mb=MEMORY_LIMIT_MB)
        items.append((probe, program + _RECORDER.format(seed=_RECORD_SEED, entry=entry)))
    own = executor is None
    ex = _own_executor(executor)
    try:
        runs = ex.run(items)
    finally:
        if own:
            ex.close()
    out = {}
    for (probe, _), r in zip(items, runs):
        if not r.ok or not isinstance(r.outputs[0], list) or not r.outputs[0]:
            raise InputError(f"{probe.id}: recording the check's calls with the canonical solution "
                             f"failed ({r.detail or r.errors[0]}); the data file or sandbox is broken")
        out[probe.id] = [to_json_obj([list(a), o]) for a, o in r.outputs[0]]
    return out


def _cached(kind: str, sha: str, ids: list[str], compute) -> dict:
    """{id: value} from a JSON cache keyed by the data file's hash; `compute(missing_ids)`
    fills what is not cached yet."""
    path = cache_dir() / f"{kind}-{sha[:16]}-v{_CACHE_FORMAT}.json"
    cached = {}
    if path.exists():
        try:
            cached = json.loads(path.read_text())
        except ValueError:
            cached = {}
    missing = [i for i in ids if i not in cached]
    if missing:
        cached.update(compute(missing))
        atomic_write_text(path, json.dumps(cached))
    return {i: cached[i] for i in ids}


def _own_executor(executor):
    return executor or Executor(SandboxConfig(max_sample_time_s=600.0))


_MACHINE_DEPENDENT = ("timeout", "harness_error")


def _calibrate(problems: list[Problem], refs: dict[str, str], executor) -> dict[str, dict]:
    """Run each reference on its tests: which tests it fails (an extraction or data bug) and
    how much CPU its slowest test takes. A problem whose run timed out or hit a harness
    error is run again alone; if that persists it is an error, not a cached fact."""
    import dataclasses

    own = executor is None
    ex = _own_executor(executor)
    out, trouble = {}, {}
    try:
        pending = list(problems)
        for attempt in range(1 + CALIBRATION_RETRIES):
            batches = [pending] if attempt == 0 else [[p] for p in pending]
            pending = []
            for batch in batches:
                probes = [dataclasses.replace(p, time_limit_s=CALIBRATION_LIMIT_S) for p in batch]
                vs = ex.verify([(p, Sample(p.id, "reference", refs[p.id])) for p in probes],
                               early_exit=False)
                for p, v in zip(batch, vs):
                    if v.verdict.value == "compile_error":
                        raise InputError(f"{p.id}: the reference solution does not compile "
                                         f"({v.detail}); the data file is broken")
                    bad = [t.verdict.value for t in v.tests if t.verdict.value != "passed"]
                    if (v.verdict.value in _MACHINE_DEPENDENT or not v.tests
                            or any(b in _MACHINE_DEPENDENT for b in bad)
                            or len(v.tests) < len(p.tests)):
                        trouble[p.id] = f"{v.verdict}: {v.detail}"
                        pending.append(p)
                        continue
                    trouble.pop(p.id, None)
                    failed = [i for i, t in enumerate(v.tests) if t.verdict.value != "passed"]
                    out[p.id] = {"failed": failed,
                                 "slowest_cpu_s": max(t.cpu_s or 0.0 for t in v.tests)}
            if not pending:
                break
    finally:
        if own:
            ex.close()
    if trouble:
        raise InputError(f"the reference solution of {', '.join(sorted(trouble)[:5])} could not "
                         f"be run to the end in {1 + CALIBRATION_RETRIES} tries "
                         f"({next(iter(trouble.values()))}); the machine or the sandbox is broken")
    return out


def _apply_calibration(bench_name, sha, problems, refs, executor, skipped) -> list[Problem]:
    """The time rule of `limits.time_limit_from_reference`, and no test the reference itself
    fails (each one dropped is counted in `skipped`)."""
    import dataclasses

    cal = _cached(f"{bench_name}-calibration", sha, [p.id for p in problems],
                  lambda ids: _calibrate([p for p in problems if p.id in set(ids)], refs, executor))
    out = []
    for p in problems:
        c = cal[p.id]
        tests = [t for i, t in enumerate(p.tests) if i not in set(c["failed"])]
        for i in c["failed"]:
            skipped.append(Skipped(p.id, "reference fails this test", f"test {i}"))
        if not tests:
            skipped.append(Skipped(p.id, "reference fails every test"))
            continue
        meta = dict(p.metadata, **({"dropped_tests": len(c["failed"])} if c["failed"] else {}))
        out.append(dataclasses.replace(p, tests=tests, metadata=meta,
                                       time_limit_s=time_limit_from_reference([c["slowest_cpu_s"]])))
    return out


def load_humaneval(path: str | Path | None = None, *, executor=None) -> BenchmarkSet:
    """HumanEval with tests read from its asserts (recorded in the sandbox where needed)."""
    path = Path(path) if path else data_root() / "humaneval" / "HumanEval.jsonl.gz"
    rows = _read_jsonl_gz(path)
    sha = file_sha256(path)
    problems: dict[str, Problem] = {}
    refs, to_record, order = {}, {}, []
    for lineno, row in enumerate(rows, 1):
        where = f"{path}:{lineno}"
        for key in ("task_id", "prompt", "entry_point", "canonical_solution", "test"):
            if not isinstance(row.get(key), str):
                raise InputError(f"{where}: field '{key}' missing or not a string")
        tid, entry, prompt = row["task_id"], row["entry_point"], row["prompt"]
        if tid in refs:
            raise InputError(f"{where}: field 'task_id': duplicate id {tid!r}")
        order.append(tid)
        refs[tid] = prompt + row["canonical_solution"]
        check = _check_function(row["test"], where)
        meta = {"source_tests": "asserts"}
        try:
            cases = cases_from_statements(check.body, name_is(check.args.args[0].arg))
            if not cases:
                raise Unsupported("no assert to read")
            problems[tid] = _problem_from_cases(tid, entry, cases, prompt, meta)
        except Unsupported as e:
            to_record[tid] = (refs[tid] + "\n\n" + row["test"], entry, prompt, str(e))
    if to_record:
        recs = _cached("humaneval-recorded", sha, list(to_record), lambda ids: _record_calls(
            {k: to_record[k][:2] for k in ids}, executor))
        for tid, (_, entry, prompt, why) in to_record.items():
            pairs = from_json_obj(recs[tid])
            poly = tid == "HumanEval/32"   # find_zero: any x with |poly(xs, x)| < 1e-4 is right
            problems[tid] = Problem(
                id=tid, kind="call", entry_point=entry,
                tests=[TestCase(args=list(a), expected=o) for a, o in pairs],
                time_limit_s=MIN_TIME_LIMIT_S, memory_limit_mb=MEMORY_LIMIT_MB,
                atol=1e-4 if poly else 0.0, oracle="poly_root" if poly else "default",
                prompt=prompt, metadata={"source_tests": "recorded", "why_recorded": why},
            )
    notes = [f"{len(to_record)} tasks' tests were recorded by running their check() with the "
             f"canonical solution in the sandbox (random seeded {_RECORD_SEED}): "
             f"{', '.join(sorted(to_record, key=lambda s: int(s.split('/')[-1])))}"] if to_record else []
    skipped: list[Skipped] = []
    final = _apply_calibration("humaneval", sha, [problems[t] for t in order], refs, executor, skipped)
    return BenchmarkSet(name="humaneval", version=_KNOWN.get(sha, "unknown (local file)"),
                        source=str(path), source_sha256=sha, problems=final, skipped=skipped,
                        notes=notes, references=refs)


# ------------------------------------------------------------------------------------------------
# MBPP (sanitized)
# ------------------------------------------------------------------------------------------------

def _parse_quietly(code: str) -> ast.Module:
    # Reference code with regexes like "\w" in plain strings warns on every parse.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(code)


def _defined_names(code: str) -> set[str]:
    try:
        mod = _parse_quietly(code)
    except SyntaxError:
        return set()
    return {n.name for n in mod.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _called_names(stmts) -> list[str]:
    names = []
    for st in stmts:
        for node in ast.walk(st):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                names.append(node.func.id)
    return names


def mbpp_prompt(text: str, first_test: str) -> str:
    """The evalplus MBPP+ prompt layout: the description and one example assert in a docstring."""
    return f'"""\n{text.strip()}\n{first_test.strip()}\n"""\n'


def load_mbpp(path: str | Path | None = None, *, executor=None) -> BenchmarkSet:
    path = Path(path) if path else data_root() / "mbpp" / "sanitized-mbpp.json"
    if not path.exists():
        raise InputError(f"{path}: file not found (`selfplay data fetch` downloads the pinned "
                         "releases; or set $SELFPLAY_DATA to a local mirror, or pass --data)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise InputError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON array of tasks")
    sha = file_sha256(path)
    problems, skipped, refs, seen = [], [], {}, set()
    for i, row in enumerate(data):
        where = f"{path}: record {i}"
        if not isinstance(row, dict):
            raise InputError(f"{where}: expected an object")
        if not isinstance(row.get("task_id"), int) or isinstance(row.get("task_id"), bool):
            raise InputError(f"{where}: field 'task_id' missing or not an integer")
        tid = f"Mbpp/{row['task_id']}"
        where = f"{where} ({tid})"
        for key in ("prompt", "code"):
            if not isinstance(row.get(key), str):
                raise InputError(f"{where}: field '{key}' missing or not a string")
        tests = row.get("test_list")
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
            raise InputError(f"{where}: field 'test_list' must be a non-empty list of strings")
        if tid in seen:
            raise InputError(f"{where}: field 'task_id': duplicate id {tid!r}")
        seen.add(tid)
        refs[tid] = row["code"]
        try:
            stmts = [s for t in tests for s in _parse_quietly(t.strip()).body]
        except SyntaxError as e:
            raise InputError(f"{where}: field 'test_list': does not parse ({e.msg})") from None
        defined = _defined_names(row["code"])
        entry = next((n for n in _called_names(stmts) if n in defined), None)
        if entry is None:
            skipped.append(Skipped(where, "cannot find the function under test", tid))
            continue
        try:
            cases = cases_from_statements(stmts, name_is(entry))
            if not cases:
                raise Unsupported("no assert to read")
            problems.append(_problem_from_cases(
                tid, entry, cases, mbpp_prompt(row["prompt"], tests[0]),
                {"source_tests": "asserts", "test_imports": row.get("test_imports") or []}))
        except Unsupported as e:
            skipped.append(Skipped(where, "unsupported assert", str(e)))
    problems = _apply_calibration("mbpp", sha, problems, refs, executor, skipped)
    return BenchmarkSet(name="mbpp", version=_KNOWN.get(sha, "unknown (local file)"),
                        source=str(path), source_sha256=sha, problems=problems, skipped=skipped,
                        references=refs)



