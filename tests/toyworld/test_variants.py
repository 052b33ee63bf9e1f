import random

import pytest

from selfplay_core.toyworld.tasks import IN_REPS, OUT_REPS, NATIVE, Task, sample_task, sample_base_value
from selfplay_core.toyworld.variants import adapter_count, variant


def _pairs(axis, direction, n=60, seed=0):
    rng = random.Random(f"{seed}{axis}{direction}")
    out = []
    while len(out) < n:
        t = sample_task(rng, rng.choice((1, 2, 3)))
        v = variant(t, axis, direction, rng)
        if v is not None:
            out.append((t, v))
    return out


def _is_subsequence(short, long):
    it = iter(long)
    return all(s in it for s in short)


def test_f_easier_removes_one_step():
    for t, v in _pairs("f", "easier"):
        assert v.depth == t.depth - 1 and _is_subsequence(v.steps, t.steps)
        assert v.in_rep == t.in_rep


def test_f_harder_adds_one_step():
    for t, v in _pairs("f", "harder"):
        assert v.depth == t.depth + 1 and _is_subsequence(t.steps, v.steps)
        assert v.in_rep == t.in_rep


def test_f_same_replaces_one_step():
    for t, v in _pairs("f", "same"):
        assert v.depth == t.depth
        assert sum(a != b for a, b in zip(t.steps, v.steps)) == 1


def _to_base_out(value, rep):
    if rep == "ints_csv":
        return [int(s) for s in value.split(",") if s]
    if rep == "int_str":
        return int(value)
    if rep == "str_chars":
        return "".join(value)
    return value


@pytest.mark.parametrize("direction", ["easier", "harder", "same"])
def test_io_variants_keep_the_algorithm_and_change_the_representation(direction):
    rng = random.Random(1)
    for t, v in _pairs("io", direction):
        assert v.steps == t.steps
        assert (v.in_rep, v.out_rep) != (t.in_rep, t.out_rep)
        delta = adapter_count(v) - adapter_count(t)
        assert delta == {"easier": -1, "harder": 1, "same": 0}[direction]
        # Same behaviour once inputs and outputs are written the same way.
        base = IN_REPS[t.in_rep].base
        for _ in range(10):
            b = sample_base_value(base, rng)
            got_t = _to_base_out(t.function()(IN_REPS[t.in_rep].encode(b)), t.out_rep)
            got_v = _to_base_out(v.function()(IN_REPS[v.in_rep].encode(b)), v.out_rep)
            assert got_t == got_v


def test_no_variant_when_none_exists():
    rng = random.Random(0)
    native = Task("ints", (("sum", None),), "int")
    assert variant(native, "f", "easier", rng) is None      # depth 1 cannot lose a step
    assert variant(native, "io", "easier", rng) is None     # already native on both sides
    with pytest.raises(ValueError):
        variant(native, "g", "easier", rng)
