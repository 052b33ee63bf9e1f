import itertools
import math

import pytest

from selfplay_core.goalposts import mine_goalposts
from selfplay_core.problems import Problem
from selfplay_core.toyworld.metrics import mean_pass_at_k, pass_at_k


def _brute(n, c, k):
    fails = [0] * (n - c) + [1] * c
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(fails[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n,c,k", [(5, 0, 1), (5, 1, 1), (5, 2, 3), (8, 3, 8), (10, 1, 4), (7, 7, 2)])
def test_pass_at_k_matches_brute_force(n, c, k):
    assert math.isclose(pass_at_k(n, c, k), _brute(n, c, k), abs_tol=1e-12)


def test_pass_at_k_large_n_is_stable():
    assert math.isclose(pass_at_k(1000, 1, 1), 0.001)
    assert 0 < pass_at_k(2000, 3, 100) < 1
    assert mean_pass_at_k([(4, 0), (4, 4)], 1) == 0.5


def test_pass_at_k_bad_input():
    for args in [(5, 6, 1), (5, 1, 0), (4, 1, 8)]:
        with pytest.raises(ValueError):
            pass_at_k(*args)


def _probs(n):
    return [Problem(id=f"p{i}", kind="call", entry_point="f", tests=[]) for i in range(n)]


def test_mining_keeps_only_never_solved_and_stops_sampling_solved_ones():
    # A deterministic reference solver: problem i is solved once it has seen >= 8*i samples
    # (i = 0 never), so p1 is solved in the first round and p9 never within k = 64.
    seen = {}

    def solver(problems, n):
        out = []
        for p in problems:
            i = int(p.id[1:])
            seen[p.id] = seen.get(p.id, 0) + n
            out.append(1 if i and seen[p.id] >= 8 * i else 0)
        return out

    res = mine_goalposts(_probs(10), [solver], k=64, chunk=16)
    assert [p.id for p in res.goalposts] == ["p0", "p9"]
    assert res.samples["p1"] == 16 and res.samples["p0"] == 64 and res.samples["p9"] == 64


def test_goalposts_must_resist_every_reference_solver():
    def never(problems, n):
        return [0] * len(problems)

    def solves_even(problems, n):
        return [int(int(p.id[1:]) % 2 == 0) for p in problems]

    res = mine_goalposts(_probs(6), [never, solves_even], k=8, chunk=8)
    assert [p.id for p in res.goalposts] == ["p1", "p3", "p5"]
    with pytest.raises(ValueError):
        mine_goalposts(_probs(2), [], k=8)
