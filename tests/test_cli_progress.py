"""The run's progress: the time left is the iterations left at the mean pace of those done in
this process (set-up, goalpost mining and the start's evaluation are not iterations, so they do
not count)."""

import io

from selfplay_core.progress import StepProgress


def bar():
    return StepProgress(12, "gasp", "iteration", file=io.StringIO(), terminal=False)


def test_no_estimate_before_the_first_iteration():
    assert bar().left() is None


def test_the_mean_iteration_time_times_the_iterations_left():
    b = StepProgress(5, "gasp", "iteration", file=io.StringIO(), terminal=False)
    b.advance_to(1, 60.0)
    b.advance_to(2, 120.0)
    assert b.left() == "0:04:30"                      # 90 s x 3
    c = StepProgress(3, "gasp", "iteration", file=io.StringIO(), terminal=False)
    c.advance_to(1, 3000.0)
    assert c.left() == "1:40:00"                      # 6000 s


def test_a_resumed_run_counts_from_where_it_stopped():
    out = io.StringIO()
    b = StepProgress(12, "gasp", "iteration", file=out, terminal=False)
    b.advance_to(7, 60.0)                             # resumed after 6, one more done here
    assert b.left() == "0:05:00"                      # 5 left x 60 s
    assert out.getvalue().startswith("gasp: 7/12 iterations (58%)")


def test_nothing_left_shows_nothing():
    b = bar()
    b.advance_to(12, 60.0)
    assert b.left() is None
