"""HumanEval+ and MBPP+ (evalplus release files) as executor `Problem`s.

The release files hold inputs only; expected outputs come from running the canonical solution
once in the sandbox (as evalplus does) and are cached, keyed by the data file's hash.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

from selfplay_core.problems import InputError, Problem, TestCase

DATA_ROOT_ENV = "SELFPLAY_DATA"
# evalplus runs each sample under a 4 GiB address-space limit; some plus inputs need it.
MEMORY_LIMIT_MB = 4096

# evalplus (data/mbpp.py, v0.2.0): MBPP+ inputs stored as JSON lists that the functions expect
# as tuples / sets / complex numbers. Task ids grouped by the conversion they need.
_TUPLE_EACH_ARG = {2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596,
                   616, 630, 726, 740, 744, 809}
_TUPLE_INSIDE_EACH_ARG = {63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780}
_TUPLES_IN_FIRST_ARG = {75, 413, 444, 753}
_SECOND_ARG_TUPLE = {106, 750}
_FIRST_ARG_TUPLE = {250, 405, 446, 617, 720, 763, 808}
_NESTED_THEN_ARGS_TUPLE = {259, 401, 445}
_ALL_TUPLES = {580, 615, 791}

# evalplus special oracles, by task id.
_MBPP_ORACLES = {
    "Mbpp/2": "set_eq", "Mbpp/7": "set_eq", "Mbpp/111": "set_eq", "Mbpp/140": "set_eq",
    "Mbpp/232": "set_eq", "Mbpp/249": "set_eq", "Mbpp/579": "set_eq", "Mbpp/769": "set_eq",
    "Mbpp/581": "mbpp_surface_area", "Mbpp/558": "mbpp_digit_distance",
    "Mbpp/295": "sum_div_or_zero", "Mbpp/164": "always",
}
_MBPP_NOT_NONE_ENTRY = {"check_str", "text_match_three", "text_starta_endb"}


def _deep_tuple(x):
    return tuple(_deep_tuple(v) for v in x) if isinstance(x, list) else x


def mbpp_decode_inputs(task_id: str, inputs: list) -> list:
    """Turn MBPP+ JSON inputs into the Python values the functions expect."""
    n = int(task_id.split("/")[-1])
    if n in _TUPLE_EACH_ARG:
        return [[tuple(a) for a in inp] for inp in inputs]
    if n in _TUPLE_INSIDE_EACH_ARG:
        return [[[tuple(x) for x in a] for a in inp] for inp in inputs]
    if n in _TUPLES_IN_FIRST_ARG:
        return [[[tuple(x) for x in inp[0]], inp[1]] for inp in inputs]
    if n in _SECOND_ARG_TUPLE:
        return [[inp[0], tuple(inp[1])] for inp in inputs]
    if n == 115:
        return [[[set(x) if isinstance(x, list) and x else {} for x in inp[0]]] for inp in inputs]
    if n == 124:
        return [[float(inp[0]), complex(inp[1])] for inp in inputs]
    if n in _FIRST_ARG_TUPLE:
        return [[tuple(inp[0]), inp[1]] for inp in inputs]
    if n in _NESTED_THEN_ARGS_TUPLE:
        return [[tuple(tuple(x) for x in a) for a in inp] for inp in inputs]
    if n == 278:
        return [[tuple(tuple(x) if isinstance(x, list) else x for x in inp[0])] for inp in inputs]
    if n == 307:
        return [[tuple(inp[0]), inp[1], inp[2]] for inp in inputs]
    if n == 722:
        return [[{k: tuple(v) for k, v in inp[0].items()}, *inp[1:]] for inp in inputs]
    if n == 252:
        return [[complex(inp[0])] for inp in inputs]
    if n in _ALL_TUPLES:
        return [list(_deep_tuple(inp)) for inp in inputs]
    return inputs


def data_root() -> Path:
    """`$SELFPLAY_DATA` (a local mirror), else where `selfplay data fetch` puts the releases."""
    env = os.environ.get(DATA_ROOT_ENV)
    if env:
        return Path(env)
    from selfplay_core.datasets.sources import default_data_root

    return default_data_root()


def _read_jsonl_gz(path: Path) -> list[dict]:
    if not path.exists():
        raise InputError(f"{path}: file not found (`selfplay data fetch` downloads the pinned "
                         f"releases; or set ${DATA_ROOT_ENV} to a local mirror, or pass --data)")
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    raise InputError(f"{path}:{lineno}: not valid JSON ({e})") from None
    return rows


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _field(row, key, path, lineno):
    if key not in row:
        raise InputError(f"{path}:{lineno}: missing field '{key}'")
    return row[key]


def load_humanevalplus(path: str | Path | None = None, with_path: bool = False):
    """Problems (without expected outputs yet) and canonical programs by task id
    (and the file read, with `with_path`)."""
    path = Path(path) if path else data_root() / "humanevalplus" / "HumanEvalPlus.jsonl.gz"
    problems, canon = [], {}
    for lineno, row in enumerate(_read_jsonl_gz(path), 1):
        tid = _field(row, "task_id", path, lineno)
        inputs = list(_field(row, "base_input", path, lineno)) + list(row.get("plus_input") or [])
        prompt = _field(row, "prompt", path, lineno)
        problems.append(Problem(
            id=tid, kind="call", entry_point=_field(row, "entry_point", path, lineno),
            tests=[TestCase(args=list(a), has_expected=False) for a in inputs],
            memory_limit_mb=MEMORY_LIMIT_MB, atol=float(row.get("atol") or 0.0),
            oracle="poly_root" if tid == "HumanEval/32" else "default",
            prompt=prompt, metadata={"n_base": len(row["base_input"])},
        ))
        canon[tid] = prompt + _field(row, "canonical_solution", path, lineno)
    return (problems, canon, path) if with_path else (problems, canon)


def load_mbppplus(path: str | Path | None = None, with_path: bool = False):
    path = Path(path) if path else data_root() / "mbppplus" / "MbppPlus.jsonl.gz"
    problems, canon = [], {}
    for lineno, row in enumerate(_read_jsonl_gz(path), 1):
        tid = _field(row, "task_id", path, lineno)
        plus = row.get("plus_input") or []
        if isinstance(plus, dict):  # Mbpp/793 stores an empty dict
            plus = []
        base = _field(row, "base_input", path, lineno)
        inputs = mbpp_decode_inputs(tid, list(base)) + mbpp_decode_inputs(tid, list(plus))
        entry = _field(row, "entry_point", path, lineno)
        oracle = "not_none" if entry in _MBPP_NOT_NONE_ENTRY else _MBPP_ORACLES.get(tid, "default")
        problems.append(Problem(
            id=tid, kind="call", entry_point=entry,
            tests=[TestCase(args=list(a), has_expected=False) for a in inputs],
            memory_limit_mb=MEMORY_LIMIT_MB, atol=float(row.get("atol") or 0.0), oracle=oracle,
            prompt=_field(row, "prompt", path, lineno), metadata={"n_base": len(base)},
        ))
        canon[tid] = _field(row, "canonical_solution", path, lineno)
    return (problems, canon, path) if with_path else (problems, canon)
