"""Strict decoding of what crosses from the sandbox into the trusted parent.

Two kinds of bytes arrive from a worker: the worker's own framing (test index, time, end
records: trusted code, but still parsed without trusting the shape), and payloads that carry
what the untrusted program produced (a result value, an exception name, a stdout text). A
payload is decoded here against a strict, size-bounded schema; anything that does not fit is
`BadRecord`, which the executor turns into *that sample's* runtime error. Nothing a program
writes can become a harness error, another sample's result, or unbounded work for the parent:

* numbers: decimal integers longer than 80 digits and float literals longer than 40 characters
  are refused before conversion (the encoder sends integers beyond 2**256 as hex, which decodes
  in linear time), so a million-digit integer cannot stall the event loop;
* containers: at most `MAX_CONTAINERS` lists/objects per value, so a 16 MB record cannot
  expand into gigabytes of Python objects; nesting is bounded by the JSON decoder's recursion
  guard;
* tags: every JSON object must be exactly one known tag with a payload of the right type
  (tuples, sets and dict keys hold hashable values only; complex parts are finite-size numbers;
  bytes are latin-1 text; hex integers match `-?0x[0-9a-f]+`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from selfplay_core.values import Digest, Opaque

MAX_CONTAINERS = 1 << 20
_MAX_INT_DIGITS = 80
_MAX_FLOAT_CHARS = 40
_HEX = re.compile(r"-?0x[0-9a-f]+")
_DIGEST = re.compile(r"[A-Za-z_]{1,20}/[0-9]{1,12}:[0-9a-f]{64}")
_LONG_NUMBER = re.compile(rb"[0-9]{%d}" % (_MAX_INT_DIGITS + 1))


class BadRecord(ValueError):
    """A payload from the sandbox that does not follow the schema."""


def _parse_int(s: str) -> int:
    if len(s.lstrip("-")) > _MAX_INT_DIGITS:
        raise BadRecord("integer literal too long")
    return int(s)


def _parse_float(s: str) -> float:
    if len(s) > _MAX_FLOAT_CHARS:
        raise BadRecord("float literal too long")
    return float(s)


def _parse_constant(s: str) -> float:
    return float(s)  # NaN, Infinity, -Infinity


def _hashable(v: Any) -> Any:
    t = type(v)
    if t is list or t is dict or t is set:
        raise BadRecord("unhashable value where a key or set element belongs")
    if t is tuple:
        for e in v:
            _hashable(e)
    return v


def _untag(o: dict) -> Any:
    if len(o) != 1:
        raise BadRecord("object is not a single tag")
    (k, v), = o.items()
    if k == "__t__":
        if type(v) is not list:
            raise BadRecord("bad tuple")
        return tuple(v)
    if k == "__d__":
        if type(v) is not list:
            raise BadRecord("bad dict")
        out = {}
        for kv in v:
            if type(kv) is not list or len(kv) != 2:
                raise BadRecord("bad dict item")
            out[_hashable(kv[0])] = kv[1]
        return out
    if k == "__s__" or k == "__f__":
        if type(v) is not list:
            raise BadRecord("bad set")
        items = [_hashable(e) for e in v]
        return set(items) if k == "__s__" else frozenset(items)
    if k == "__c__":
        if type(v) is not list or len(v) != 2 or any(type(x) not in (int, float) for x in v):
            raise BadRecord("bad complex")
        try:
            return complex(v[0], v[1])
        except OverflowError:
            raise BadRecord("complex part out of range") from None
    if k == "__b__":
        if type(v) is not str:
            raise BadRecord("bad bytes")
        try:
            return v.encode("latin-1")
        except UnicodeEncodeError:
            raise BadRecord("bad bytes") from None
    if k == "__i__":
        if type(v) is not str or not _HEX.fullmatch(v):
            raise BadRecord("bad big integer")
        return int(v, 16)
    if k == "__h__":
        if type(v) is not str or not _DIGEST.fullmatch(v):
            raise BadRecord("bad digest")
        return Digest(v)
    if k == "__o__":
        if type(v) is not str or len(v) > 100:
            raise BadRecord("bad opaque marker")
        return Opaque(v)
    raise BadRecord("unknown tag")


def decode_output(payload: bytes) -> Any:
    """A call result from the sandbox as a plain value, or BadRecord."""
    if payload.count(b"[") + payload.count(b"{") > MAX_CONTAINERS:
        raise BadRecord("result has too many containers")
    try:
        text = payload.decode("ascii")
        if _LONG_NUMBER.search(payload):
            # Rare (long digit runs, e.g. inside strings): the slower path checks each number.
            return json.loads(text, object_hook=_untag, parse_int=_parse_int,
                              parse_float=_parse_float, parse_constant=_parse_constant)
        return json.loads(text, object_hook=_untag)
    except BadRecord:
        raise
    except (ValueError, TypeError, RecursionError, MemoryError, UnicodeDecodeError,
            OverflowError, KeyError, IndexError) as e:
        raise BadRecord(f"unreadable result ({type(e).__name__})") from None


def decode_json_fields(payload: bytes, fields: tuple[str, ...], max_len: int = 2000) -> dict:
    """A small JSON object the worker built (exception name and message): string fields only."""
    if len(payload) > 4 * max_len:
        raise BadRecord("record too long")
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError, UnicodeDecodeError):
        raise BadRecord("unreadable record") from None
    if type(obj) is not dict or set(obj) != set(fields) or any(type(obj[f]) is not str for f in fields):
        raise BadRecord("record does not follow the schema")
    return {f: obj[f][:max_len] for f in fields}


def decode_stdout(payload: bytes) -> str:
    try:
        out = json.loads(payload)
    except (ValueError, RecursionError, UnicodeDecodeError):
        raise BadRecord("unreadable stdout record") from None
    if type(out) is not str:
        raise BadRecord("stdout record is not text")
    return out
