"""The value codec shared by sandbox and parent: round trips and hostile inputs."""

import math

import pytest

from selfplay_core.sandbox.worker import Opaque, decode_value, encode_value

ROUND_TRIP = [
    None, True, False, 0, -7, 2**63, -(10**400), 1.5, -0.0, math.inf, -math.inf,
    "", "héllo\n\"", [], [1, [2, [3]]], (), (1, "a", (2.5,)), {"a": 1}, {1: "x", (2, 3): [4]},
    {1, 2, 3}, frozenset({"a"}), {frozenset({1}): {2: (3,)}}, 3 + 4j, b"\x00\xff", bytearray(b"ab"),
]


@pytest.mark.parametrize("value", ROUND_TRIP, ids=lambda v: repr(v)[:30])
def test_round_trip_keeps_value_and_type(value):
    back = decode_value(encode_value(value))
    expected = bytes(value) if isinstance(value, bytearray) else value
    assert back == expected
    assert type(back) is type(expected)


def test_nan_survives():
    assert math.isnan(decode_value(encode_value(float("nan"))))


def test_subclasses_reduce_to_plain_values():
    class Liar(int):
        def __eq__(self, other):
            return True

        def __repr__(self):
            return "999"

    class S(str):
        def __str__(self):
            return "forged"

    back = decode_value(encode_value([Liar(3), S("real"), (Liar(1),)]))
    assert back == [3, "real", (1,)]
    assert type(back[0]) is int and type(back[1]) is str


def test_unknown_objects_become_opaque_and_equal_nothing():
    class Anything:
        def __eq__(self, other):
            return True

    back = decode_value(encode_value(Anything()))
    assert isinstance(back, Opaque)
    assert back != back and not (back == 1)


def test_self_referential_value_is_rejected_not_hung():
    x = []
    x.append(x)
    with pytest.raises(Exception):
        encode_value(x)


@pytest.mark.parametrize("text", [
    '{"__t__": [[1], [2]]}', '{"__s__": [[1, 2]]}', '{"__d__": [[[1], 2]]}', '{"__c__": ["x", 1]}',
])
def test_forged_tags_decode_or_fail_cleanly(text):
    try:
        decode_value(text)
    except (ValueError, TypeError):
        pass


def test_digest_round_trips_and_compares_by_hash():
    from selfplay_core.sandbox.worker import Digest, _digest

    assert decode_value(encode_value(Digest("list/3:abc"))) == Digest("list/3:abc")
    assert Digest("a") != Digest("b") and Digest("a") != "a"
    assert _digest({"b", "a"}) == _digest({"a", "b"})          # order-free for sets
    assert _digest([1, 2]) != _digest((1, 2)) != _digest([2, 1])  # type and order matter
