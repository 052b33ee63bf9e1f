"""LiveCodeBench `code_generation_lite` as executor `Problem`s.

Sources: the official JSONL files (from the Hugging Face hub, or a local copy of them) and the
public-tests-only file in `shared/data/livecodebench`, which uses the same schema plus a few
fields (`uid`, `split`, ...). One parser serves both, so errors name the file and line.

Test encoding (LCB schema): `public_test_cases` is a JSON string of `{"input", "output",
"testtype"}` dicts; `private_test_cases` is either the same or base64 -> zlib -> pickle -> JSON
string. `stdin` tests feed `input` to the program and compare stdout with `output`;
`functional` tests call `Solution().<func_name>` with one JSON value per input line and compare
the return value with the JSON `output`.

Windows and filters: the literature's evaluation window for LCB v5 is contest dates
2024-08-01 .. 2025-02-01 (end exclusive); the GASP training split is everything before
2024-08-01. Rows whose date/platform/difficulty is unknown (the local file's training rows)
are placed only when that is certain (e.g. a row known to be "before 2024-08-01" is certainly
outside the evaluation window); otherwise they are skipped with a counted reason.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import io
import json
import pickle
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from selfplay_core.datasets.benchmark import BenchmarkSet, Skipped, files_sha256
from selfplay_core.datasets.evalplus import data_root
from selfplay_core.problems import InputError, Problem, TestCase

HUB_REPO = "livecodebench/code_generation_lite"
DEFAULT_FILE = "lcb_release_v5_public_tests.jsonl"

# Release tags of code_generation_lite and the (cumulative) files each one reads: every
# testN.jsonl holds the problems added in release N.
RELEASE_FILES = {f"release_v{n}": ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, n + 1)]
                 for n in range(1, 7)}
RELEASE_FILES["release_latest"] = RELEASE_FILES["release_v6"]
# Single-release deltas ("v3" = only the problems added in release 3).
RELEASE_FILES.update({f"v{n}": ["test.jsonl" if n == 1 else f"test{n}.jsonl"] for n in range(1, 7)})

WINDOWS = {
    "test": ("2024-08-01", "2025-02-01"),   # LCB v5 2408-2502 (DeepSeek-R1, QwQ, DeepCoder, GASP)
    "train": (None, "2024-08-01"),          # GASP goalpost mining / real-data RL split
    "all": (None, None),
}
PLATFORMS = ("leetcode", "atcoder", "codeforces")
DIFFICULTIES = ("easy", "medium", "hard")

# LeetCode time limits are per test in LCB's harness (6 s by default in its runner).
DEFAULT_TIME_LIMIT_S = 6.0
DEFAULT_MEMORY_MB = 2048
# Private tests of some problems decompress to tens of MB; refuse anything absurd.
MAX_DECOMPRESSED_BYTES = 1 << 30

_KNOWN_FILES = {
    "0252b9192dbd5a061a54a797b470c5ecc66fb1115742b27bc885f3bc261c51f9":
        "release_v5 public-tests-only (616 of 879 problems; shared/data/livecodebench)",
}


# ------------------------------------------------------------------------------------------------
# Private tests: base64 -> zlib -> pickle -> JSON text, decoded with the narrowest loader we can.
# ------------------------------------------------------------------------------------------------

class _TextOnlyUnpickler(pickle.Unpickler):
    """Unpickles only data that needs no global: str/bytes/numbers/containers. Any reference to
    a class or function (the only way pickle runs code) is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing persistent id")


def _inflate(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj()
    out = d.decompress(data, limit + 1)
    if len(out) > limit or d.unconsumed_tail:
        raise ValueError(f"decompresses to more than {limit} bytes")
    return out + d.flush()


def unpack_private_tests(blob: str, *, limit: int = MAX_DECOMPRESSED_BYTES) -> str:
    """The JSON text inside LCB's compressed `private_test_cases` (raises ValueError)."""
    try:
        raw = base64.b64decode(blob.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise ValueError(f"not base64 ({e})") from None
    try:
        data = _inflate(raw, limit)
    except zlib.error as e:
        raise ValueError(f"not zlib data ({e})") from None
    try:
        obj = _TextOnlyUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError) as e:
        raise ValueError(f"not a plain pickled string ({e})") from None
    if isinstance(obj, bytes):
        obj = obj.decode("utf-8")
    if not isinstance(obj, str):
        raise ValueError(f"pickle holds {type(obj).__name__}, expected a JSON string")
    return obj


def pack_private_tests(tests: list[dict]) -> str:
    """The inverse of `unpack_private_tests` (for fixtures and round-trip tests)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


def _decode_tests(raw, where: str, fieldname: str) -> list[dict]:
    if raw is None or raw == "" or raw == []:
        return []
    if isinstance(raw, str):
        if raw.lstrip().startswith("["):
            text = raw
        else:
            try:
                text = unpack_private_tests(raw)
            except ValueError as e:
                raise InputError(f"{where}: field '{fieldname}': {e}") from None
        try:
            tests = json.loads(text)
        except ValueError as e:
            raise InputError(f"{where}: field '{fieldname}': not valid JSON ({e})") from None
    elif isinstance(raw, list):
        tests = raw
    else:
        raise InputError(f"{where}: field '{fieldname}' has type {type(raw).__name__}")
    if not isinstance(tests, list):
        raise InputError(f"{where}: field '{fieldname}' must decode to a list of tests")
    for j, t in enumerate(tests):
        if not isinstance(t, dict):
            raise InputError(f"{where}: field '{fieldname}[{j}]' must be an object")
        for key in ("input", "output"):
            if not isinstance(t.get(key), str):
                raise InputError(f"{where}: field '{fieldname}[{j}].{key}' must be a string")
        if t.get("testtype") not in ("stdin", "functional"):
            raise InputError(f"{where}: field '{fieldname}[{j}].testtype' must be 'stdin' or "
                             f"'functional', got {t.get('testtype')!r}")
    return tests


def functional_args(text: str) -> list:
    """LCB functional input: one JSON value per line, one line per positional argument."""
    lines = text.rstrip("\n").split("\n")
    return [json.loads(line) for line in lines]


def _to_testcase(t: dict, where: str) -> TestCase:
    if t["testtype"] == "stdin":
        return TestCase(stdin=t["input"], expected=t["output"])
    try:
        args = functional_args(t["input"])
    except ValueError as e:
        raise InputError(f"{where}.input: not one JSON value per line ({e})") from None
    try:
        expected = json.loads(t["output"])
    except ValueError as e:
        raise InputError(f"{where}.output: not JSON ({e})") from None
    return TestCase(args=args, expected=expected)


# ------------------------------------------------------------------------------------------------
# Rows -> problems
# ------------------------------------------------------------------------------------------------

_FUNC_RE = re.compile(r"^\s*def\s+([A-Za-z_]\w*)\s*\(\s*self\b", re.M)


@dataclass
class LcbRow:
    """One row's cheap fields, parsed before its (possibly large) private tests are decoded, so
    that rows outside the filters never pay for decompression."""

    where: str
    pid: str
    qid: str | None
    uid: str | None
    content: str
    platform: str | None
    difficulty: str | None
    date: _dt.date | None
    date_range: tuple[_dt.date | None, _dt.date | None]   # [lo, hi) when the exact date is unknown
    starter: str
    meta: dict
    public: list[dict]
    private: list[dict] | None = None                      # decoded on demand

    @property
    def kind(self) -> str | None:
        tests = self.public or self.private or []
        if not tests:
            return None
        return "call" if tests[0]["testtype"] == "functional" else "stdin"


def _parse_date(s, where, fieldname) -> _dt.date | None:
    if s is None or s == "":
        return None
    if isinstance(s, (_dt.datetime, _dt.date)):
        return s.date() if isinstance(s, _dt.datetime) else s
    if not isinstance(s, str):
        raise InputError(f"{where}: field '{fieldname}' has type {type(s).__name__}")
    try:
        return _dt.date.fromisoformat(s[:10])
    except ValueError:
        raise InputError(f"{where}: field '{fieldname}': not an ISO date: {s[:40]!r}") from None


_SPLIT_RE = re.compile(r"^(?:train_before_(\d{4}-\d{2}-\d{2})|test_(\d{4}-\d{2}-\d{2})_to_(\d{4}-\d{2}-\d{2}))$")


def _range_from_split(split) -> tuple[_dt.date | None, _dt.date | None]:
    m = _SPLIT_RE.match(split or "")
    if not m:
        return (None, None)
    if m.group(1):
        return (None, _dt.date.fromisoformat(m.group(1)))
    return (_dt.date.fromisoformat(m.group(2)), _dt.date.fromisoformat(m.group(3)))


def _opt_str(row, key, where):
    v = row.get(key)
    if v is not None and not isinstance(v, str):
        raise InputError(f"{where}: field '{key}' has type {type(v).__name__}")
    return v or None


def parse_row(row: dict, where: str, *, tests: str = "all", time_limit_s: float = DEFAULT_TIME_LIMIT_S,
              memory_limit_mb: int = DEFAULT_MEMORY_MB) -> Problem | None:
    """One LCB row as a Problem (None if it has no test of the requested kind)."""
    return _to_problem(_header(row, where), row, tests=tests, time_limit_s=time_limit_s,
                       memory_limit_mb=memory_limit_mb)


def _header(row: dict, where: str) -> LcbRow:
    content = row.get("question_content")
    if not isinstance(content, str) or not content.strip():
        raise InputError(f"{where}: field 'question_content' missing or not a non-empty string")
    qid = row.get("question_id")
    if qid is not None and not isinstance(qid, (str, int)):
        raise InputError(f"{where}: field 'question_id' has type {type(qid).__name__}")
    qid = None if qid in (None, "") else str(qid)
    uid = _opt_str(row, "uid", where)
    pid = qid or uid
    if not pid:
        raise InputError(f"{where}: field 'question_id' is missing (and there is no 'uid')")
    platform = _opt_str(row, "platform", where)
    if platform is not None:
        platform = platform.lower()
        if platform not in PLATFORMS:
            raise InputError(f"{where}: field 'platform' must be one of {', '.join(PLATFORMS)}, "
                             f"got {platform!r}")
    difficulty = _opt_str(row, "difficulty", where)
    if difficulty is not None:
        difficulty = difficulty.lower()
        if difficulty not in DIFFICULTIES:
            raise InputError(f"{where}: field 'difficulty' must be one of {', '.join(DIFFICULTIES)}, "
                             f"got {difficulty!r}")
    date = _parse_date(row.get("contest_date"), where, "contest_date")
    meta_raw = row.get("metadata")
    if isinstance(meta_raw, str):
        try:
            meta = json.loads(meta_raw) if meta_raw.strip() else {}
        except ValueError as e:
            raise InputError(f"{where}: field 'metadata': not valid JSON ({e})") from None
    elif isinstance(meta_raw, dict) or meta_raw is None:
        meta = meta_raw or {}
    else:
        raise InputError(f"{where}: field 'metadata' has type {type(meta_raw).__name__}")
    if not isinstance(meta, dict):
        raise InputError(f"{where}: field 'metadata' must decode to an object")
    public = _decode_tests(row.get("public_test_cases"), where, "public_test_cases")
    return LcbRow(where, pid, qid, uid, content, platform, difficulty, date,
                  (date, date) if date else _range_from_split(row.get("split")),
                  _opt_str(row, "starter_code", where) or "", meta, public)


def _to_problem(r: LcbRow, row: dict, *, tests, time_limit_s, memory_limit_mb) -> Problem | None:
    where = r.where
    if r.private is None:
        r.private = _decode_tests(row.get("private_test_cases"), where, "private_test_cases")
    labelled = [(f"public_test_cases[{j}]", t) for j, t in enumerate(r.public)]
    labelled += [(f"private_test_cases[{j}]", t) for j, t in enumerate(r.private)]
    types = {t["testtype"] for _, t in labelled}
    if len(types) > 1:
        raise InputError(f"{where}: field 'public_test_cases'/'private_test_cases': mixes stdin "
                         "and functional tests")
    chosen = [(lab, t) for lab, t in labelled if tests == "all" or lab.startswith(tests)]
    if not chosen:
        return None
    entry = None
    if types == {"functional"}:
        func = r.meta.get("func_name")
        if not func:
            m = _FUNC_RE.search(r.starter)
            func = m.group(1) if m else None
        if not isinstance(func, str) or not func.isidentifier():
            raise InputError(f"{where}: field 'metadata.func_name': functional tests need a method "
                             "name (none in metadata or starter_code)")
        entry = f"Solution.{func}"
    cases = [_to_testcase(t, f"{where}: field '{lab}'") for lab, t in chosen]
    return Problem(
        id=r.pid, kind="call" if entry else "stdin", entry_point=entry, tests=cases,
        time_limit_s=time_limit_s, memory_limit_mb=memory_limit_mb, prompt=r.content,
        metadata={
            "question_id": r.qid, "uid": r.uid, "platform": r.platform,
            "difficulty": r.difficulty, "contest_date": r.date.isoformat() if r.date else None,
            "contest_id": row.get("contest_id"), "starter_code": r.starter,
            "title": row.get("question_title"), "split": row.get("split"),
            "n_public": len(r.public), "n_private": len(r.private), "tests_used": tests,
        },
    )


# ------------------------------------------------------------------------------------------------
# Tests the statement shows
# ------------------------------------------------------------------------------------------------

_WS = re.compile(r"\s+")


def _squash(text: str) -> str:
    return _WS.sub("", text)


def test_is_shown(problem: Problem, test: TestCase) -> bool:
    """Whether the statement shows this test: its input and its expected output both appear
    in the statement (whitespace ignored; a functional test's arguments each as JSON). Short
    values can match by chance, which errs toward "shown": never toward a test a student
    could not have copied."""
    text = _squash(problem.prompt or "")
    if problem.kind == "stdin":
        return _squash(test.stdin or "") in text and _squash(str(test.expected)) in text
    try:
        parts = [json.dumps(a) for a in (test.args or [])] + [json.dumps(test.expected)]
    except (TypeError, ValueError):
        return False
    return all(_squash(x) in text for x in parts)


def every_test_shown(problem: Problem) -> bool:
    """True when every test of `problem` is one the statement shows (the sample blocks): a
    program that copies the statement's sample outputs passes it, so it cannot give a
    training reward. LCB's public tests are exactly its statements' samples; the hub
    release's private tests are hidden."""
    return all(test_is_shown(problem, t) for t in problem.tests)


# ------------------------------------------------------------------------------------------------
# Filters. A row whose attribute is unknown is placed only when the answer is certain.
# ------------------------------------------------------------------------------------------------

def _date_status(r: LcbRow, lo: _dt.date | None, hi: _dt.date | None) -> str:
    """'in' | 'out' | 'unknown' for the window [lo, hi)."""
    if lo is None and hi is None:
        return "in"
    if r.date is not None:
        ok = (lo is None or r.date >= lo) and (hi is None or r.date < hi)
        return "in" if ok else "out"
    rlo, rhi = r.date_range  # row lies in [rlo, rhi); None = unbounded
    if rlo is None and rhi is None:
        return "unknown"
    if (hi is not None and rlo is not None and rlo >= hi) or (lo is not None and rhi is not None and rhi <= lo):
        return "out"
    inside_lo = lo is None or (rlo is not None and rlo >= lo)
    inside_hi = hi is None or (rhi is not None and rhi <= hi)
    return "in" if inside_lo and inside_hi else "unknown"


def _set_status(candidates: set[str], wanted: set[str] | None) -> str:
    if not wanted:
        return "in"
    if candidates <= wanted:
        return "in"
    if not candidates & wanted:
        return "out"
    return "unknown"


def _platform_candidates(r: LcbRow) -> set[str]:
    if r.platform:
        return {r.platform}
    # LCB: LeetCode problems are exactly the functional ones.
    return {"leetcode"} if r.kind == "call" else {"atcoder", "codeforces"}


def _as_date(v, name) -> _dt.date | None:
    if v is None or isinstance(v, _dt.date):
        return v
    try:
        return _dt.date.fromisoformat(str(v))
    except ValueError:
        raise InputError(f"{name}: not an ISO date (YYYY-MM-DD): {v!r}") from None


def _check_choices(values, allowed, name) -> set[str] | None:
    if not values:
        return None
    vals = {v.lower() for v in ([values] if isinstance(values, str) else values)}
    bad = vals - set(allowed)
    if bad:
        raise InputError(f"{name}: unknown value(s) {', '.join(sorted(bad))}; "
                         f"choose from {', '.join(allowed)}")
    return vals


# ------------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------------

def _read_rows(paths: list[Path]):
    for path in paths:
        if not path.exists():
            raise InputError(f"{path}: file not found")
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise InputError(f"{where}: not valid JSON ({e})") from None
                if not isinstance(row, dict):
                    raise InputError(f"{where}: expected a JSON object, got {type(row).__name__}")
                yield where, row


def release_files(release: str) -> list[str]:
    if release not in RELEASE_FILES:
        known = ", ".join(sorted(RELEASE_FILES, key=lambda s: (len(s), s)))
        raise InputError(f"unknown LiveCodeBench release {release!r}; known: {known}")
    return RELEASE_FILES[release]


def _infer_version(paths: list[Path], sha: str) -> str:
    if sha in _KNOWN_FILES:
        return _KNOWN_FILES[sha]
    names = sorted(p.name for p in paths)
    for tag, files in RELEASE_FILES.items():
        if tag.startswith("release_v") and sorted(files) == names:
            return tag
    m = re.search(r"release_(v\d+|latest)", " ".join(names))
    return f"release_{m.group(1)} (local file)" if m else "unknown (local file)"


def _local_paths(path: Path, release: str | None) -> list[Path]:
    if path.is_dir():
        if release:
            paths = [path / f for f in release_files(release)]
            for p in paths:
                if not p.exists():
                    raise InputError(f"{p}: file not found ({release} reads "
                                     f"{', '.join(release_files(release))})")
            return paths
        found = sorted(path.glob("test*.jsonl"), key=lambda p: (len(p.name), p.name))
        if not found:
            found = sorted(path.glob("*.jsonl"))
        if not found:
            raise InputError(f"{path}: no LiveCodeBench JSONL files in this directory")
        return found
    if not path.exists():
        raise InputError(f"{path}: file not found")
    return [path]


def hub_paths(release: str, revision: str | None = None, cache_dir: str | None = None) -> tuple[list[Path], str]:
    """Download (or find in the HF cache) the files of one release; returns paths and commit.

    `code_generation_lite` selects files by `version_tag` in a loading script, which `datasets`
    4+ no longer runs; so we fetch the same files the script would read and parse them with the
    one local parser (which also gives file:line errors)."""
    files = release_files(release)
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:  # pragma: no cover - datasets depends on huggingface_hub
        raise InputError("loading LiveCodeBench from the hub needs huggingface_hub "
                         "(pip install datasets)") from None
    paths = []
    for name in files:
        try:
            p = hf_hub_download(HUB_REPO, name, repo_type="dataset", revision=revision,
                                cache_dir=cache_dir)
        except Exception as e:  # offline, auth, missing revision: one clear message
            raise InputError(f"could not fetch {HUB_REPO}/{name} ({release}) from the Hugging Face "
                             f"hub: {type(e).__name__}: {str(e)[:200]}. Offline? Pass --data with "
                             "a local copy.") from None
        paths.append(Path(p))
    m = re.search(r"/snapshots/([0-9a-f]{40})/", str(paths[0]))
    return paths, (m.group(1) if m else (revision or "unknown"))


def load_lcb(path: str | Path | None = None, *, release: str | None = None,
             window: str | None = None, date_from=None, date_to=None,
             platforms=None, difficulties=None, kinds=None, tests: str = "all",
             time_limit_s: float = DEFAULT_TIME_LIMIT_S, memory_limit_mb: int = DEFAULT_MEMORY_MB,
             revision: str | None = None) -> BenchmarkSet:
    """Load LiveCodeBench problems.

    path: a JSONL file, or a directory with the official testN.jsonl files; None with a
    `release` loads from the hub; None without one loads the shared public-tests file.
    window: 'test' (2024-08-01..2025-02-01), 'train' (before 2024-08-01) or 'all';
    `date_from`/`date_to` (YYYY-MM-DD, end exclusive) override its bounds.
    tests: 'all' (public + private), 'public' or 'private'.
    """
    if tests not in ("all", "public", "private"):
        raise InputError(f"tests must be 'all', 'public' or 'private', got {tests!r}")
    if window is not None and window not in WINDOWS:
        raise InputError(f"unknown window {window!r}; choose from {', '.join(WINDOWS)}")
    w_from, w_to = WINDOWS[window] if window else (None, None)
    lo = _as_date(date_from if date_from is not None else w_from, "date_from")
    hi = _as_date(date_to if date_to is not None else w_to, "date_to")
    if lo and hi and lo >= hi:
        raise InputError(f"empty date window: {lo} .. {hi} (the end is exclusive)")
    want_platform = _check_choices(platforms, PLATFORMS, "platform")
    want_difficulty = _check_choices(difficulties, DIFFICULTIES, "difficulty")
    want_kind = _check_choices(kinds, ("call", "stdin"), "kind")

    if path is None and release:
        paths, commit = hub_paths(release, revision)
        source = f"hf://datasets/{HUB_REPO}@{commit} ({', '.join(p.name for p in paths)})"
        version = f"{release}@{commit[:12]}"
        sha = files_sha256(paths)
    else:
        if path is None:
            path = data_root() / "livecodebench" / DEFAULT_FILE
        paths = _local_paths(Path(path), release)
        sha = files_sha256(paths)
        source = ", ".join(str(p) for p in paths)
        version = release or _infer_version(paths, sha)

    problems: list[Problem] = []
    skipped: list[Skipped] = []
    excluded: set[str] = set()
    seen: dict[str, str] = {}
    n_without_private = 0
    for where, row in _read_rows(paths):
        r = _header(row, where)
        if r.pid in seen:
            raise InputError(f"{where}: field 'question_id': duplicate id {r.pid!r} "
                             f"(first at {seen[r.pid]})")
        seen[r.pid] = where
        if r.kind is None:  # no public test: the private ones tell the kind
            r.private = _decode_tests(row.get("private_test_cases"), where, "private_test_cases")
        checks = (
            ("date", _date_status(r, lo, hi)),
            ("platform", _set_status(_platform_candidates(r), want_platform)),
            ("difficulty", _set_status({r.difficulty} if r.difficulty else set(DIFFICULTIES),
                                       want_difficulty)),
            ("kind", _set_status({r.kind} if r.kind else {"call", "stdin"}, want_kind)),
        )
        if any(st == "out" for _, st in checks):
            excluded.add(r.pid)
            continue
        unknown = [name for name, st in checks if st == "unknown"]
        if unknown:
            skipped.append(Skipped(where, f"{'/'.join(unknown)} unknown: cannot apply the filter", r.pid))
            excluded.add(r.pid)
            continue
        p = _to_problem(r, row, tests=tests, time_limit_s=time_limit_s,
                        memory_limit_mb=memory_limit_mb)
        if p is None:
            skipped.append(Skipped(where, f"no {tests} tests", r.pid))
            excluded.add(r.pid)
            continue
        if p.metadata["n_private"] == 0:
            n_without_private += 1
        problems.append(p)

    notes = []
    if tests != "public" and n_without_private:
        notes.append(f"{n_without_private} of {len(problems)} problems have no private tests: their "
                     "scores use public tests only and are not comparable to official LCB numbers")
    filters = {"window": window, "date_from": lo.isoformat() if lo else None,
               "date_to": hi.isoformat() if hi else None,
               "platforms": sorted(want_platform) if want_platform else None,
               "difficulties": sorted(want_difficulty) if want_difficulty else None,
               "kinds": sorted(want_kind) if want_kind else None, "tests": tests,
               "time_limit_s": time_limit_s}
    return BenchmarkSet(name="lcb", version=version, source=source, source_sha256=sha,
                        problems=problems, skipped=skipped, filters=filters, notes=notes,
                        excluded_ids=excluded)
