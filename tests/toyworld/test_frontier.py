"""Frontier mining with a scripted solver: which candidates become goalposts, and why not."""

import pytest

from selfplay_core.toyworld.frontier import FrontierSettings, lemma_problems, mine_frontier
from selfplay_core.toyworld.oracle import easier_variants, task_of


def _scripted(p_goal: dict, p_lemma: dict):
    """A solver whose pass counts are exactly round(p * n): p_goal by candidate id, p_lemma by
    the lemma's goalpost id (every lemma of a goalpost gets the same rate unless keyed by id)."""
    calls = []

    def solve(problems, n):
        calls.append((len(problems), n))
        out = []
        for p in problems:
            gid = p.metadata.get("goalpost_id")
            rate = p_lemma.get(p.id, p_lemma.get(gid, 0.0)) if gid else p_goal.get(p.id, 0.0)
            out.append(int(round(rate * n)))
        return out
    solve.calls = calls
    return solve


@pytest.fixture(scope="module")
def pool(world):
    return [p for p in world.goalpost_pool.problems if p.metadata["depth"] == 3][:12]


def test_lemmas_are_the_true_one_step_easier_variants(pool):
    g = pool[0]
    got = {p.metadata["key"] for _, p in lemma_problems(g)}
    assert got == {v.key for _, v in easier_variants(task_of(g))} and got
    assert all(p.metadata["goalpost_id"] == g.id for _, p in lemma_problems(g))


def test_only_unsolved_candidates_with_a_lemma_in_band_are_goalposts(pool):
    ids = [p.id for p in pool]
    p_goal = {ids[0]: 0.5, ids[1]: 0.0, ids[2]: 0.0, ids[3]: 0.0}   # ids[0] solved in the screen
    p_lemma = {ids[1]: 0.5, ids[2]: 0.05, ids[3]: 0.9}               # in band / too hard / too easy
    for i in ids[4:]:
        p_goal[i], p_lemma[i] = 0.0, 0.0
    res = mine_frontier(pool, _scripted(p_goal, p_lemma), FrontierSettings(k=64, screen_k=16, block=5))
    assert [g.id for g in res.goalposts] == [ids[1]]
    assert res.dropped["solved_in_screen"] == 1 and res.dropped["no_lemma_in_band"] == len(ids) - 2
    assert [r["pass_rate"] for r in res.lemmas[ids[1]]] == [0.5] * len(lemma_problems(pool[1]))
    # the reserve: unsolved, no lemma in band, easiest (best lemma) first
    assert res.reserve[0] == ids[3] and ids[2] in res.reserve and ids[1] not in res.reserve
    assert res.samples[ids[1]] == 64 and res.samples[ids[0]] == 16


def _late(first_pass_after: dict, p_lemma: dict):
    """Candidates in `first_pass_after` pass exactly once, in the round that takes their sample
    count past that number (i.e. after the screen); lemmas pass at p_lemma."""
    drawn: dict = {}

    def solve(problems, n):
        out = []
        for p in problems:
            gid = p.metadata.get("goalpost_id")
            if gid:
                out.append(int(round(p_lemma.get(gid, 0.0) * n)))
                continue
            before = drawn.get(p.id, 0)
            drawn[p.id] = before + n
            t = first_pass_after.get(p.id)
            out.append(int(t is not None and before <= t < before + n))
        return out
    return solve


def test_solved_in_confirm_is_dropped_and_max_goalposts_stops_early(pool):
    ids = [p.id for p in pool]
    # every candidate has an in-band lemma; every other one passes once after 40 samples
    late = {i: 40 for n, i in enumerate(ids) if n % 2}
    p_lemma = {i: 0.5 for i in ids}
    s = FrontierSettings(k=64, screen_k=16, block=4, max_goalposts=3)
    res = mine_frontier(pool, _late(late, p_lemma), s, seed=1)
    assert len(res.goalposts) == 3 and not any(g.id in late for g in res.goalposts)
    assert res.dropped["solved_in_confirm"] >= 1
    assert res.examined < len(pool)          # stopped once three were found
    # the order is seeded, not the pool's: another seed finds other goalposts first
    other = mine_frontier(pool, _late(late, p_lemma), s, seed=2)
    assert {g.id for g in other.goalposts} != {g.id for g in res.goalposts} or other.examined != res.examined


def test_settings_are_checked():
    with pytest.raises(ValueError):
        FrontierSettings(k=16, screen_k=32)
    with pytest.raises(ValueError):
        FrontierSettings(band=(0.8, 0.2))


def test_a_shipped_goalpost_set_is_used_only_for_its_model_pool_and_settings(tmp_path):
    """`<model>/goalposts.json` (what `selfplay bootstrap --goalposts` writes) replaces mining
    when its key names the same weights, pool, band and lemma samples, and a k and a screen at
    least as large (no sample of k' >= k solved it, so no k samples did); otherwise the run
    mines."""
    import json

    from selfplay_core.loop.worlds import SHIPPED_GOALPOSTS, shipped_goalposts

    key = "c5dfec102bfd2162-w0-k128-frontier-b0.3-0.7-n16-s32"
    (tmp_path / SHIPPED_GOALPOSTS).write_text(json.dumps({"key": key, "ids": ["a", "b"]}))
    assert shipped_goalposts(tmp_path, key)["ids"] == ["a", "b"]
    assert shipped_goalposts(tmp_path, key.replace("k128", "k64"))["ids"] == ["a", "b"]
    # what a k=2 run asks for: its screen is min(32, k) = 2
    assert shipped_goalposts(tmp_path, key.replace("k128", "k2").replace("s32", "s2"))["ids"] == ["a", "b"]
    for other in (key.replace("k128", "k256"),                 # needs more samples than mined
                  key.replace("s32", "s64"),                    # a wider screen than mined
                  key.replace("-n16-", "-n8-"),                 # other lemma samples
                  key.replace("c5dfec", "000000"),              # other weights
                  key.replace("-w0-", "-w1-"),                  # other pool
                  key.replace("b0.3-0.7", "b0.2-0.8")):         # other band
        assert shipped_goalposts(tmp_path, other) is None, other
    for unreadable in ({"ids": ["a"]}, {"key": "c5dfec102bfd2162-w0-k128"}, ["a"]):   # mine
        (tmp_path / SHIPPED_GOALPOSTS).write_text(json.dumps(unreadable))
        assert shipped_goalposts(tmp_path, key) is None, unreadable
    assert shipped_goalposts(tmp_path / "missing", key) is None


def test_a_small_k_run_from_the_committed_model_starts_from_its_shipped_set(tmp_path, executor):
    """A run with a smaller k and screen than the shipped set's (tests, quick looks) takes it
    without sampling (no engine is given, so mining would fail), says so, and subsets it."""
    import json

    from selfplay_core.config import RunConfig
    from selfplay_core.loop.worlds import SHIPPED_GOALPOSTS, build_world, select_goalposts
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    shipped = json.loads((ASSET_DIR / SHIPPED_GOALPOSTS).read_text())
    cfg = RunConfig()
    cfg = cfg.model_copy(update={"world": cfg.world.model_copy(update={"goalpost_k": 2, "max_goalposts": 6})})
    world = build_world(cfg, executor=executor)
    gps = select_goalposts(world, cfg, engine=None, executor=executor, model_dir=ASSET_DIR,
                           run_dir=tmp_path, cache_root=tmp_path / "cache")
    assert len(gps) == 6 and {g.id for g in gps} <= set(shipped["ids"])
    assert world.goalpost_set.version.startswith("shipped with the model (frontier) k=128")
    assert json.loads((tmp_path / "goalposts.json").read_text())["ids"] == [g.id for g in gps]
