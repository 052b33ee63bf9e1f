"""The progress bar's ETA: the iterations left at the mean pace of those done in this process
(setup, goalpost mining and the start's evaluation are not iterations, so they do not count)."""

from selfplay_cli.run import _eta


def test_no_estimate_before_the_first_iteration():
    assert _eta([], 12) == "ETA after the first iteration"


def test_the_mean_iteration_time_times_the_iterations_left():
    assert _eta([60.0, 120.0], 3) == "ETA 0:04:30"          # 90 s x 3
    assert _eta([3000.0], 2) == "ETA 1:40:00"               # 6000 s


def test_nothing_left_shows_nothing():
    assert _eta([60.0], 0) == ""
