"""`selfplay study`'s flags become the protocol (and so its key): seeds, budget, overrides and
the number of samplings of the start checkpoint."""

from __future__ import annotations

import argparse

import pytest

from selfplay_cli import study
from selfplay_study.protocol import default_protocol


def _args(*argv: str):
    ap = argparse.ArgumentParser()
    study.register(ap.add_subparsers())
    return ap.parse_args(["study", *argv])


def test_no_flags_is_the_registered_protocol():
    assert study._protocol(_args()).key() == default_protocol().key()


def test_floor_samplings_changes_only_the_floor_and_the_key():
    base = default_protocol()
    p = study._protocol(_args("--floor-samplings", "6", "--arms", "base,rlvr"))
    assert p.final.floor_samplings == 6
    assert p.final.goalpost_k == base.final.goalpost_k and p.final.seed == base.final.seed
    assert [a.name for a in p.arms] == ["base", "rlvr"]
    assert p.key() != study._protocol(_args("--arms", "base,rlvr")).key()
    # 3 written out is the default: the same protocol, the same study folder
    assert study._protocol(_args("--floor-samplings", "3")).key() == base.key()


def test_seeds_iterations_and_overrides():
    p = study._protocol(_args("--seeds", "3,4", "--iterations", "5", "--set", "world.deep_pool=240"))
    assert p.seeds == (3, 4) and p.iterations == 5
    assert p.common[-1] == "world.deep_pool=240"


@pytest.mark.parametrize("bad", ["0", "-2", "three"])
def test_a_bad_floor_samplings_is_one_usage_error(bad, capsys):
    with pytest.raises(SystemExit) as e:
        _args("--floor-samplings", bad)
    assert e.value.code == 2
    assert f"expected a whole number >= 1, got '{bad}'" in capsys.readouterr().err
