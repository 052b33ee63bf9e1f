"""Progress: a live bar on a terminal; plain, never-redrawn lines anywhere else."""

from __future__ import annotations

import io
import re

from selfplay_core.progress import StepProgress


def test_off_a_terminal_each_step_is_one_plain_line_with_what_is_left():
    out = io.StringIO()
    with StepProgress(4, "verify", "sample", file=out, terminal=False) as bar:
        for _ in range(4):
            bar.update()
    text = out.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and "\x1b" not in text          # nothing redrawn, no escape codes
    assert [re.match(r"verify: (\d)/4 samples", ln).group(1) for ln in lines] == ["1", "2", "3", "4"]
    assert all("left" in ln for ln in lines[:-1]) and "left" not in lines[-1]


def test_off_a_terminal_a_long_job_writes_one_line_per_five_percent():
    out = io.StringIO()
    bar = StepProgress(600, "verify", "sample", file=out, terminal=False)
    for _ in range(600):
        bar.update()
    bar.close()
    lines = out.getvalue().splitlines()
    counts = [int(re.match(r"verify: (\d+)/600", ln).group(1)) for ln in lines]
    # The first step (the work has begun), then 5 %, 10 %, ..., 100 %: 21 lines.
    assert counts == [1] + [30 * i for i in range(1, 21)]


def test_a_closed_bar_reports_a_last_count_that_fell_between_lines():
    out = io.StringIO()
    bar = StepProgress(1000, "convert", "problem", file=out, terminal=False)
    bar.update(7)
    bar.close()
    assert out.getvalue().splitlines()[-1].startswith("convert: 7/1000 problems (0%)")


def test_reset_and_unknown_totals():
    out = io.StringIO()
    bar = StepProgress(None, "pretrain", "step", file=out, terminal=False)
    bar.update()
    bar.set_postfix(loss="1.234")
    bar.reset(2)
    bar.set_description("teacher phase")
    bar.update()
    bar.update()
    bar.close()
    assert out.getvalue().splitlines() == [
        "pretrain: 1 steps, 0:00:00 elapsed",
        "teacher phase: 1/2 steps (50%), 0:00:00 elapsed, about 0:00:00 left (loss 1.234)",
        "teacher phase: 2/2 steps (100%), 0:00:00 elapsed (loss 1.234)",
    ]


def test_on_a_terminal_the_bar_ends_at_its_total():
    out = io.StringIO()
    with StepProgress(3, "run", file=out, terminal=True) as bar:
        for _ in range(3):
            bar.update()
    assert "3/3" in out.getvalue()
