"""world.deep_pool: depth-5 goalpost candidates appended to the toy pool without moving any v2
split, kept out of corpora built for that world, and named in the pool's version and the
goalpost cache key; the teacher-phase corpus for it makes depth-4 sources harder too."""

import random

import pytest

from selfplay_core.config import ConfigError, RunConfig, load_config
from selfplay_core.toyworld.world import ToyWorld, ToyWorldConfig
from selfplay_core.toyworld.corpus import CorpusSettings, teacher_phase_settings
from selfplay_core.toyworld.splits import SplitSizes, build_world
from selfplay_core.toyworld.tasks import task_from_key


@pytest.fixture(scope="module")
def deep():
    return build_world(0, SplitSizes(deep_pool=40))


def test_v2_splits_are_unchanged_and_the_deep_tail_is_depth_5(world, deep):
    for name in ("train", "eval"):
        a, b = world.splits()[name], deep.splits()[name]
        assert a.content_hash == b.content_hash and a.version == b.version == "toyworld-v2-s0"
    v2, pool = world.goalpost_pool, deep.goalpost_pool
    assert [p.dumps() for p in pool.problems[:len(v2)]] == [p.dumps() for p in v2.problems]
    tail = pool.problems[len(v2):]
    assert len(tail) == 40 and {p.metadata["depth"] for p in tail} == {5}
    assert [p.id for p in tail] == [f"toy/goalpost_pool/d5/{i:04d}" for i in range(40)]
    assert pool.version == "toyworld-v2+d5x40-s0" and pool.content_hash != v2.content_hash
    for p in tail:
        assert task_from_key(p.metadata["key"]).depth == 5


def test_deep_candidates_are_new_and_held_out(world, deep):
    keys = [t.key for s in deep.splits().values() for t in s.tasks]
    assert len(keys) == len(set(keys))
    ex = deep.exclusion()
    # Held out from any corpus built for this world (the teacher phase's corpus is).
    assert all(ex.blocks(t) for t in deep.goalpost_pool.tasks[-40:])
    assert not any(ex.blocks(t) for t in deep.train.tasks)
    assert build_world(0, SplitSizes(deep_pool=40)).goalpost_pool.content_hash == deep.goalpost_pool.content_hash


def test_the_deep_teacher_phase_makes_depth_4_sources_harder():
    from selfplay_core.toyworld.corpus import _draw_pair
    from selfplay_core.toyworld.corpus import Exclusion

    def directions(settings):
        rng, seen = random.Random(3), set()
        for _ in range(400):
            src, dst, _, direction = _draw_pair(rng, settings, Exclusion())
            if src.depth == 4:
                seen.add((direction, dst.depth))
        return seen

    assert {d for d, _ in directions(CorpusSettings())} == {"easier"}
    assert ("harder", 5) in directions(teacher_phase_settings(0.6, 0.09, 100, deep=True))
    assert teacher_phase_settings(0.6, 0.09, 100) == teacher_phase_settings(0.6, 0.09, 100, deep=False)


def test_depth_5_sources_are_made_easier_and_pool_candidates_stay_out():
    from selfplay_core.toyworld.corpus import _draw_pair

    world = build_world(0, SplitSizes(deep_pool=40))
    ex, pool = world.exclusion(), {t.key for t in world.goalpost_pool.tasks}
    settings = teacher_phase_settings(0.6, 0.09, 100, deep=True, depth5_sources=True)
    rng, seen = random.Random(4), set()
    for _ in range(300):
        src, dst, _, direction = _draw_pair(rng, settings, ex)
        assert src.key not in pool and dst.key not in pool
        if src.depth == 5:
            seen.add((direction, dst.depth))
    # Only "easier" (an io-axis variant keeps the depth); the f axis gives the d5->4 lemma.
    assert {d for d, _ in seen} == {"easier"} and ("easier", 4) in seen
    with pytest.raises(ValueError, match="need the deep teacher phase"):
        teacher_phase_settings(0.6, 0.09, 100, depth5_sources=True)


def test_the_run_world_and_its_goalpost_key():
    plain = RunConfig()
    deep = plain.model_copy(update={"world": plain.world.model_copy(update={"deep_pool": 24})})
    a, b = ToyWorld(plain), ToyWorld(deep)
    assert a.goalpost_cache_tag(plain) == "w0" and b.goalpost_cache_tag(deep) == "w0d5x24"
    assert "-" not in b.goalpost_cache_tag(deep)   # keys are split on dashes
    assert len(b.goalpost_pool) == len(a.goalpost_pool) + 24
    assert b.splits()["goalpost_pool"].version == "toyworld-v2+d5x24-s0"


def test_deep_pool_outside_the_toy_world_is_refused():
    with pytest.raises(ConfigError, match="world.deep_pool: unknown key \\(a key of world 'toy'; "
                                          "this run's world is 'lcb'\\)"):
        load_config(None, ["world.name=lcb", "world.deep_pool=10"])
    with pytest.raises(ValueError):
        ToyWorldConfig(deep_pool=-1)


def test_a_depth_6_pool_has_its_own_stream_version_and_ids(deep):
    d6 = build_world(0, SplitSizes(deep_pool=40, deep_depth=6))
    n = len(d6.goalpost_pool) - 40
    tail = d6.goalpost_pool.problems[n:]
    assert {p.metadata["depth"] for p in tail} == {6}
    assert [p.id for p in tail] == [f"toy/goalpost_pool/d6/{i:04d}" for i in range(40)]
    assert d6.goalpost_pool.version == "toyworld-v2+d6x40-s0"
    # the v2 part and the other splits are the depth-5 world's; the depth-5 pool is untouched
    assert [p.dumps() for p in d6.goalpost_pool.problems[:n]] == [p.dumps() for p in deep.goalpost_pool.problems[:n]]
    assert d6.eval.content_hash == deep.eval.content_hash and d6.train.content_hash == deep.train.content_hash
    assert all(d6.exclusion().blocks(t) for t in d6.goalpost_pool.tasks[n:])
    with pytest.raises(ValueError, match="deep_depth must be 5 or 6"):
        SplitSizes(deep_pool=4, deep_depth=7)


def test_depth_6_sources_are_made_easier_and_the_depth_6_pool_stays_out():
    from selfplay_core.toyworld.corpus import _draw_pair

    world = build_world(0, SplitSizes(deep_pool=40, deep_depth=6))
    pool = {t.key for t in world.goalpost_pool.tasks}
    settings = teacher_phase_settings(0.6, 0.09, 100, deep=True, depth6_sources=True)
    rng, seen = random.Random(6), set()
    for _ in range(300):
        src, dst, _, direction = _draw_pair(rng, settings, world.exclusion())
        assert src.key not in pool and dst.key not in pool
        seen.add((src.depth, direction, dst.depth))
    assert ("easier", 5) in {(d, t) for s, d, t in seen if s == 6}
    assert {d for s, d, _ in seen if s >= 5} == {"easier"}
    # no pair writes a depth-6 program from a shallower source: harder pairs stop at 4 -> 5
    assert max(t for _, _, t in seen) <= 6 and not any(t == 6 and s < 6 for s, _, t in seen)
    with pytest.raises(ValueError, match="need the deep teacher phase"):
        teacher_phase_settings(0.6, 0.09, 100, depth6_sources=True)


def test_the_run_world_with_a_depth_6_pool():
    plain = RunConfig()
    cfg = plain.model_copy(update={"world": ToyWorldConfig(deep_pool=24, deep_depth=6)})
    w = ToyWorld(cfg)
    assert w.goalpost_cache_tag(cfg) == "w0d6x24"
    assert w.splits()["goalpost_pool"].version == "toyworld-v2+d6x24-s0"
    with pytest.raises(ValueError, match="it needs world.deep_pool > 0"):
        ToyWorldConfig(deep_depth=6)
    with pytest.raises(ValueError):
        ToyWorldConfig(deep_pool=4, deep_depth=7)
