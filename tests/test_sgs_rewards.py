"""SGS's reward formulas (DESIGN.md §1, issue 12), as tables whose expected values were computed
by hand: R_guide, the batch's easiest share, R_solve, the min-max normalisation, R_synth, and
GASP x Guide's scaled band reward."""

import pytest

from selfplay_core import rewards as R

R_GUIDE = [
    # relevance, redundancy, complexity -> 0 if cx >= 3 else max(0, rel + (2 - cx) + (1 - red))
    ((5, 0, 0), 8.0),
    ((3, 0, 1), 5.0),
    ((0, 1, 2), 0.0),
    ((2, 1, 2), 2.0),
    ((0, 0, 0), 3.0),
    ((1, 1, 0), 3.0),
    ((4, 0, 3), 0.0),   # complexity 3: no guide reward however relevant
    ((5, 0, 4), 0.0),
]


@pytest.mark.parametrize("scores,expected", R_GUIDE)
def test_r_guide(scores, expected):
    assert R.r_guide(*scores) == expected


@pytest.mark.parametrize("bad", [(6, 0, 0), (3, 2, 0), (3, 0, 5), (-1, 0, 0)])
def test_r_guide_out_of_range_is_an_error(bad):
    with pytest.raises(ValueError, match="out of range"):
        R.r_guide(*bad)


R_SOLVE = [
    # 10 problems, 30 % = 3: the three easiest (1.0, 0.875, 0.75) get 0, p = 0 gets 0, else 1 - p
    ([0.0, 0.25, 0.5, 0.75, 1.0, 0.125, 0.375, 0.625, 0.875, 0.5],
     [0.0, 0.75, 0.5, 0.0, 0.0, 0.875, 0.625, 0.375, 0.0, 0.5]),
    # a tie block larger than 30 % of the batch is not the easiest share: all keep 1 - p
    ([0.5, 0.5, 0.5, 0.25], [0.5, 0.5, 0.5, 0.75]),
    # 7 problems, 30 % = 2.1: the two tied at 0.75 fit; the 0.5 pair would make 4
    ([0.75, 0.75, 0.25, 0.25, 0.5, 0.5, 0.125], [0.0, 0.0, 0.75, 0.75, 0.5, 0.5, 0.875]),
    # 2 problems: one is 50 % of the batch, more than 30 %: no easiest share
    ([0.5, 0.25], [0.5, 0.75]),
    ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]),
]


@pytest.mark.parametrize("ps,expected", R_SOLVE)
def test_r_solve(ps, expected):
    assert R.r_solve(ps) == pytest.approx(expected)


def test_easiest_share_marks_at_most_that_share():
    assert R.easiest_share([0.0, 0.25, 0.5, 0.75, 1.0, 0.125, 0.375, 0.625, 0.875, 0.5]) == \
        [False, False, False, True, True, False, False, False, True, False]
    assert R.easiest_share([0.9, 0.1, 0.5, 0.3], share=0.5) == [True, False, True, False]
    assert R.easiest_share([0.9, 0.1], share=0.0) == [False, False]


NORMALISE = [([2.0, 4.0, 3.0], [0.0, 1.0, 0.5]), ([1.0, 1.0], [0.0, 0.0]), ([], []),
             ([0.0, 6.0, 1.5], [0.0, 1.0, 0.25])]


@pytest.mark.parametrize("xs,expected", NORMALISE)
def test_min_max_normalise(xs, expected):
    assert R.min_max_normalise(xs) == pytest.approx(expected)


R_SYNTH = [
    # 5 problems (30 % = 1.5): 0.875 is the easiest; R_solve = [.75, .5, 0, 0, .625];
    # x R_guide [8, 2, 8, 8, 0] = [6, 1, 0, 0, 0]; min-max -> [1, 1/6, 0, 0, 0]
    ([0.25, 0.5, 0.875, 0.0, 0.375], [8, 2, 8, 8, 0], [1.0, 1 / 6, 0.0, 0.0, 0.0]),
    ([0.25, 0.5], [4, 4], [1.0, 0.0]),        # raw [3, 2]
    ([0.5, 0.5], [2, 2], [0.0, 0.0]),         # raw [1, 1]: one value, no signal
]


@pytest.mark.parametrize("ps,guide,expected", R_SYNTH)
def test_r_synth(ps, guide, expected):
    assert R.r_synth(ps, guide) == pytest.approx(expected)


def test_r_synth_needs_one_guide_reward_per_problem():
    with pytest.raises(ValueError, match="2 pass rates but 1"):
        R.r_synth([0.1, 0.2], [3])


GUIDED = [((1.0, 0.5), 0.5), ((0.84, 0.0), 0.0), ((0.4, 1.0), 0.4), ((-0.5, 0.2), -0.5), ((-0.5, 1.0), -0.5)]


@pytest.mark.parametrize("args,expected", GUIDED)
def test_guided_band_scales_only_a_positive_band_reward(args, expected):
    assert R.guided_band(*args) == pytest.approx(expected)


def test_guided_band_needs_a_normalised_score():
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        R.guided_band(1.0, 1.5)
