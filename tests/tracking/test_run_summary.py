"""The end of `make run`: the per-iteration table and the sentences on how the run went."""

import math

from selfplay_core.tracking.run_summary import describe_run, metrics_table


def history(p1_start, p1_end, *, p8=(0.45, 0.38), solved=(0, 2), union=3, total=40, steps=4):
    h = []
    for s in range(steps + 1):
        t = s / steps
        row = {"step": s, "eval/all/pass@1": p1_start + t * (p1_end - p1_start),
               "eval/all/pass@8": p8[0] + t * (p8[1] - p8[0])}
        if s % 2 == 0:
            row.update({"goalposts/solved": float(solved[0] if s == 0 else solved[1]),
                        "goalposts/solved_union": float(0 if s == 0 else union),
                        "goalposts/total": float(total)})
        if s:
            row.update({"student/accepted/reward": 0.25, "teacher/lemma/acceptance": 0.5,
                        "teacher/lift/acceptance": 0.1875})
        h.append(row)
    return h


def test_table_keeps_full_metric_names_and_prints_counts_as_integers():
    text = metrics_table(history(0.156, 0.106))
    head1, head2, *rows = text.splitlines()
    # Every metric's full name is there, split at its last "/" over the two header lines.
    cols = [(a, b) for a, b in zip(head1.split(), head2.split()[1:])]
    assert [f"{a}/{b}" for a, b in cols] == [
        "eval/all/pass@1", "eval/all/pass@8", "goalposts/solved", "goalposts/solved_union",
        "student/accepted/reward", "teacher/lemma/acceptance", "teacher/lift/acceptance"]
    assert head2.split()[0] == "step"
    first, last = rows[0].split(), rows[-1].split()
    assert first == ["0", "0.156", "0.450", "0", "0", "-", "-", "-"]
    assert last == ["4", "0.106", "0.380", "2", "3", "0.250", "0.500", "0.188"]
    # Steps without a goalpost evaluation show a dash, not a number.
    assert rows[1].split()[3:5] == ["-", "-"]


def test_a_worse_run_says_so_with_the_noise_band():
    lines = describe_run(history(0.156, 0.106), samples_per_eval=480, method="gasp")
    text = "\n".join(lines)
    band = 2 * math.sqrt((0.156 * 0.844 + 0.106 * 0.894) / 480)
    assert f"held-out pass@1: 0.156 at the start, 0.106 at the end (-0.050): worse than the start " \
           f"(beyond sampling noise, ±{band:.3f})." in text
    assert "held-out pass@8: 0.450 at the start, 0.380 at the end (-0.070): lower." in text
    assert "0 of 40 solved at the start, 2 of 40 by the last checkpoint, 3 of 40 by any checkpoint" in text
    assert "measured over seeds, and why: docs/results.md." in text
    assert lines[0].startswith("How the gasp run went against its start checkpoint")


def test_a_small_change_is_about_the_same():
    text = "\n".join(describe_run(history(0.156, 0.166), samples_per_eval=480))
    assert "(+0.010): about the same as the start (within sampling noise" in text


def test_a_better_run_and_the_best_iteration():
    h = history(0.156, 0.209)
    h[2]["eval/all/pass@1"] = 0.25
    text = "\n".join(describe_run(h, samples_per_eval=480))
    assert "(+0.053): better than the start (beyond sampling noise" in text
    assert "best held-out pass@1: 0.250 at iteration 2" in text


def test_without_a_sample_count_it_gives_the_direction_only():
    text = "\n".join(describe_run(history(0.2, 0.1)))
    assert "0.200 at the start, 0.100 at the end (-0.100): lower." in text


def test_a_run_without_two_evaluations_says_there_is_nothing_to_compare():
    text = "\n".join(describe_run([{"step": 0, "eval/all/pass@1": 0.1}]))
    assert "nothing to compare" in text
