"""The value codec of the sandbox and of every file holding test values: JSON plus tags for the
Python values JSON cannot carry, so tuples, sets, non-string dict keys, big ints and bytes survive
a file or the sandbox's pipe. `to_json_obj` / `from_json_obj` work on JSON object trees,
`encode_value` / `decode_value` on strings.

Stdlib only, and no `from __future__` import: the sandbox worker (`sandbox/worker.py`) runs as
``python -I -S -c <source>`` with this module's source ahead of its own (see
`sandbox.backends.worker_source`), so both sides of the pipe use one codec. The trusted parent
imports it as a module (problems, datasets, buffers, the executor).
"""

import json

# JSON plus tags for the Python values that JSON cannot carry: tuples, sets, frozensets,
# dicts with non-string keys (all dicts are tagged, to keep key types), complex, bytes.
# Floats keep NaN/Infinity through Python's JSON extension. Subclasses of the plain types are
# reduced to the plain type via the base class's own methods, so a result object cannot carry
# behaviour (an overridden __eq__, say) to the parent; anything else is unserializable.

_BIG = 1 << 256


class Unserializable(Exception):
    pass


class Opaque(object):
    """Stands for a non-plain object returned by untrusted code; equal to nothing."""

    __slots__ = ("type_name",)

    def __init__(self, type_name):
        self.type_name = type_name

    def __eq__(self, other):
        return False

    def __ne__(self, other):
        return True

    __hash__ = object.__hash__

    def __repr__(self):
        return "<opaque %s>" % self.type_name


class Digest(object):
    """Stands for an output too large to ship (see _LARGE): a type-prefixed sha256 of its
    canonical repr. Compared exactly; equal only to a Digest with the same hash."""

    __slots__ = ("hexdigest",)

    def __init__(self, hexdigest):
        self.hexdigest = hexdigest

    def __eq__(self, other):
        return type(other) is Digest and other.hexdigest == self.hexdigest

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(self.hexdigest)

    def __repr__(self):
        return "<digest %s>" % self.hexdigest[:24]


# Outputs with more elements than this (estimated from the first element) travel as a Digest:
# encoding and shipping them (MBPP+ has 1.6M-tuple outputs) would cost more than running the
# test. Such outputs are compared exactly, without float tolerance.
_LARGE = 200000


def _is_large(x):
    t = type(x)
    if not (t is list or t is tuple or t is dict or t is set or t is frozenset or t is str
            or t is bytes):
        return False
    n = len(x)
    if n and (t is list or t is tuple):
        first = x[0]
        if type(first) in (list, tuple, str):
            n *= max(1, len(first))
    return n > _LARGE


def _digest(x):
    """Type-prefixed sha256 of a canonical byte form: marshal format 2 (which writes values,
    never object identities), streamed element by element; top-level sets and dicts sorted."""
    import hashlib
    import marshal
    t = type(x)
    h = hashlib.sha256()
    if t is set or t is frozenset:
        parts = sorted(marshal.dumps(e, 2) for e in x)
    elif t is dict:
        parts = sorted(marshal.dumps((k, v), 2) for k, v in x.items())
    elif t is list or t is tuple:
        parts = (marshal.dumps(e, 2) for e in x)
    else:
        parts = (marshal.dumps(x, 2),)
    n = 0
    for part in parts:
        h.update(b"%d:" % len(part))
        h.update(part)
        n += 1
    return "%s/%d:%s" % (t.__name__, n, h.hexdigest())


def _plain(x, depth=0):
    if depth > 200:
        raise Unserializable("value nested deeper than 200 levels")
    t = type(x)
    if t is int:
        # Decimal conversion of big ints is quadratic; hex is linear both ways.
        return x if -_BIG < x < _BIG else {"__i__": hex(x)}
    if x is None or t is bool or t is str or t is float:
        return x
    if t is list:
        return [_plain(v, depth + 1) for v in x]
    if t is tuple:
        return {"__t__": [_plain(v, depth + 1) for v in x]}
    if t is dict:
        return {"__d__": [[_plain(k, depth + 1), _plain(v, depth + 1)] for k, v in x.items()]}
    if t is set:
        return {"__s__": [_plain(v, depth + 1) for v in x]}
    if t is frozenset:
        return {"__f__": [_plain(v, depth + 1) for v in x]}
    if t is complex:
        return {"__c__": [x.real, x.imag]}
    if t is bytes or t is bytearray:
        return {"__b__": bytes(x).decode("latin-1")}
    # Subclasses: take the underlying plain value through the base type's C methods.
    if isinstance(x, bool):
        return bool(int.__index__(x))
    if isinstance(x, int):
        return _plain(int.__index__(x), depth)
    if isinstance(x, float):
        return float.__float__(x)
    if isinstance(x, str):
        return str.__str__(x)
    if isinstance(x, tuple):
        return {"__t__": [_plain(v, depth + 1) for v in tuple.__iter__(x)]}
    if isinstance(x, list):
        return [_plain(v, depth + 1) for v in list.__iter__(x)]
    if isinstance(x, dict):
        return {"__d__": [[_plain(k, depth + 1), _plain(dict.__getitem__(x, k), depth + 1)]
                          for k in dict.__iter__(x)]}
    if isinstance(x, (set, frozenset)):
        return {"__s__": [_plain(v, depth + 1) for v in set(x)]}
    if t is Digest:
        return {"__h__": x.hexdigest}
    # Any other object travels as an opaque marker: it equals nothing (so it can never pass a
    # value comparison) but still counts as "returned something" for not-None oracles.
    return {"__o__": t.__name__[:100]}


def encode_value(x):
    """Serialize a plain Python value to a JSON string (raises Unserializable)."""
    return json.dumps(_plain(x), ensure_ascii=True, separators=(",", ":"))


def _untag(o):
    if len(o) == 1:
        (k, v), = o.items()
        if k == "__t__":
            return tuple(v)
        if k == "__d__":
            return {_hashable(kk): vv for kk, vv in v}
        if k == "__s__":
            return set(_hashable(e) for e in v)
        if k == "__f__":
            return frozenset(_hashable(e) for e in v)
        if k == "__c__":
            return complex(v[0], v[1])
        if k == "__b__":
            return v.encode("latin-1")
        if k == "__i__":
            return int(v, 16)
        if k == "__h__":
            return Digest(str(v))
        if k == "__o__":
            return Opaque(str(v))
    return o


def _hashable(v):
    # Trusted data only (files we wrote): a list where a key belongs is made hashable. The
    # untrusted channel is decoded by `sandbox.channel.decode_output`, which refuses such values.
    if type(v) is list:
        return tuple(_hashable(e) for e in v)
    return v


def decode_value(s):
    """Parse a JSON string produced by :func:`encode_value` back into plain Python values.
    For trusted data (problem files, caches); results of untrusted code go through
    `selfplay_core.sandbox.channel.decode_output`."""
    return json.loads(s, object_hook=_untag)


def from_json_obj(o):
    """Decode an already-parsed JSON object tree that uses the tagged encoding."""
    if type(o) is list:
        return [from_json_obj(v) for v in o]
    if type(o) is dict:
        return _untag({k: from_json_obj(v) for k, v in o.items()})
    return o


to_json_obj = _plain  # the public name: a plain value -> its tagged JSON object tree
