import pytest

from selfplay_core import rewards

LEMMA = [(0.4, 0.8154), (0.5, 1.0), (0.6, 0.8154), (0.3, 0.4182), (0.7, 0.4182),
         (0.29, -0.5), (0.71, -0.5), (0.0, -0.5), (1.0, -0.5)]
LIFT = [(0.1, 1.0), (0.2, 0.6929), (0.3, 0.3125), (0.5, 0.0252), (0.05, -0.5), (0.51, -0.5),
        (0.0, -0.5), (1.0, -0.5)]
AZR = [(0.25, 0.75), (0.5, 0.5), (0.9, 0.1), (0.0, -0.5), (1.0, -0.5)]


@pytest.mark.parametrize("p,r", LEMMA)
def test_r_lemma(p, r):
    assert rewards.r_lemma(p) == pytest.approx(r, abs=1e-4)


@pytest.mark.parametrize("p,r", LIFT)
def test_r_lift(p, r):
    assert rewards.r_lift(p) == pytest.approx(r, abs=1e-4)


@pytest.mark.parametrize("p,r", AZR)
def test_azr_propose(p, r):
    assert rewards.azr_propose(p) == pytest.approx(r)


def test_configurable_constants():
    assert rewards.r_lemma(0.9, out_of_band=-1.0) == -1.0
    assert rewards.r_lift(0.6, band=(0.1, 0.6)) == pytest.approx(6 * (0.4 / 0.9) ** 9)
    assert rewards.azr_propose(0.0, extreme=0.0) == 0.0


def test_peaks_are_where_the_spec_says():
    grid = [i / 1000 for i in range(1001)]
    assert max(grid, key=rewards.r_lemma) == 0.5
    assert max(grid, key=rewards.r_lift) == 0.1


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_pass_rate_outside_unit_interval_is_an_error(bad):
    with pytest.raises(ValueError, match="pass rate"):
        rewards.r_lemma(bad)


def test_student_and_invalid_proposal_rewards():
    assert rewards.student(True) == 1.0 and rewards.student(False) == 0.0
    assert rewards.student(False, well_formatted=False, format_penalty=-1.0) == -1.0
    assert rewards.invalid_proposal(parsed=False) == -1.0
    assert rewards.invalid_proposal(parsed=True) == -0.5
