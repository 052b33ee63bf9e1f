"""The dynamic-goalpost rule, step by step against hand-written expectations."""

import pytest

from selfplay_core.dynamic_goalposts import DynamicState, update


def test_retire_after_n_consecutive_solved_checks_and_promote_in_reserve_order():
    s = DynamicState(active=["a", "b", "c"], reserve=["d", "e"])
    s, out, new = update(s, {"a": True, "b": False, "c": True}, solved_checks=2, label="iter 2")
    assert (out, new, s.active, s.streak) == ([], [], ["a", "b", "c"], {"a": 1, "b": 0, "c": 1})
    # a solved again -> retired, d promoted; c missed once -> its streak starts over
    s, out, new = update(s, {"a": True, "b": True, "c": False}, solved_checks=2, label="iter 4")
    assert out == ["a"] and new == ["d"]
    assert s.active == ["b", "c", "d"] and s.reserve == ["e"]
    assert s.streak == {"b": 1, "c": 0, "d": 0}
    assert s.retired == [{"id": "a", "at": "iter 4"}]
    assert s.promoted == [{"id": "d", "at": "iter 4", "replaces": "a"}]
    # b qualifies (d, promoted at the last check, needs two checks of its own); e is promoted
    s, out, new = update(s, {"b": True, "c": False, "d": True}, solved_checks=2, label="iter 6")
    assert out == ["b"] and new == ["e"] and s.active == ["c", "d", "e"] and s.reserve == []
    s, out, new = update(s, {"c": False, "d": True, "e": False}, solved_checks=2, label="iter 8")
    assert out == ["d"] and new == [] and s.active == ["c", "e"]   # reserve exhausted


def test_unchecked_goalposts_keep_their_streak():
    s = DynamicState(active=["a", "b"], streak={"a": 1, "b": 1})
    s, out, _ = update(s, {"a": True}, solved_checks=2, label="x")
    assert out == ["a"] and s.streak == {"b": 1}


def test_a_candidate_already_solved_is_skipped_at_promotion():
    s = DynamicState(active=["a"], reserve=["b", "c"])
    s, out, new = update(s, {"a": True}, solved_checks=1, label="t", unsolved_now=lambda g: g != "b")
    assert out == ["a"] and new == ["c"] and s.active == ["c"]
    assert {"id": "b", "at": "t", "skipped": True} in s.retired


def test_json_round_trip_and_bad_n():
    s = DynamicState(active=["a"], reserve=["b"], streak={"a": 1})
    assert DynamicState.from_json(s.to_json()) == s and DynamicState.from_json(None) is None
    with pytest.raises(ValueError):
        update(s, {}, solved_checks=0, label="x")
