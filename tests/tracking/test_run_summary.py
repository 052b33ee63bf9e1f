"""The end of `make run`: the per-iteration table and the sentences on how the run went."""

import math

from selfplay_core.evaluation.verdict import Verdict
from selfplay_core.tracking.run_summary import describe_run, metrics_table, table_columns, table_legend


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
    assert f"in-loop held-out evaluation, pass@1: 0.156 at the start, 0.106 at the end (-0.050): worse " \
           f"than the start (beyond sampling noise, ±{band:.3f})." in text
    assert "in-loop held-out evaluation, pass@8: 0.450 at the start, 0.380 at the end (-0.070): lower." in text
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
    assert "best in-loop pass@1: 0.250 at iteration 2" in text


def test_without_a_sample_count_it_gives_the_direction_only():
    text = "\n".join(describe_run(history(0.2, 0.1)))
    assert "0.200 at the start, 0.100 at the end (-0.100): lower." in text


def test_a_run_without_two_evaluations_says_there_is_nothing_to_compare():
    text = "\n".join(describe_run([{"step": 0, "eval/all/pass@1": 0.1}]))
    assert "nothing to compare" in text


JUDGEMENTS = ("better", "worse", "no clear change", "about the same", "higher", "lower", "the same.")


def test_in_loop_and_verdict_figures_of_opposite_sign_give_one_judgement_per_k():
    """The in-loop evaluation rose (+0.050 pass@1, +0.070 pass@8 on its subset) while the verdict
    on the whole held-out set fell: the report judges only by the verdict, one line per k, and
    gives the in-loop figures as numbers labelled as such."""
    h = history(0.156, 0.206, p8=(0.38, 0.45))
    verdict = [Verdict("held-out pass@1", 0.180, 0.140, 0.012, 300).line(),
               Verdict("held-out pass@8", 0.400, 0.390, 0.020, 300).line()]
    lines = describe_run(h, samples_per_eval=480, method="gasp", verdict=verdict,
                         in_loop="60 problems x 8 samples, each iteration")
    judged = [ln for ln in lines if any(w in ln for w in JUDGEMENTS)]
    assert judged == ["    held-out pass@1 0.180 -> 0.140 (-0.040 ± 0.012 s.e., 300 problems): worse than the start checkpoint",
                      "    held-out pass@8 0.400 -> 0.390 (-0.010 ± 0.020 s.e., 300 problems): no clear change "
                      "from the start checkpoint (within 2 s.e.)"]
    (in_loop,) = [ln for ln in lines if "in-loop" in ln and "best" not in ln]
    assert "(60 problems x 8 samples, each iteration)" in in_loop
    assert "pass@1 0.156 -> 0.206 (+0.050)" in in_loop and "pass@8 0.380 -> 0.450 (+0.070)" in in_loop
    assert "not a second verdict" in in_loop


def test_the_floor_is_defined_where_it_is_printed():
    h = history(0.156, 0.106, solved=(0, 4), union=7, total=15)
    for row in h:
        if "goalposts/solved" in row:
            row.update({"goalposts/floor": 1.25, "goalposts/floor_union": 5.0})
    cols = table_columns(h)
    assert "goalposts/floor" in cols and "goalposts/floor_union" in cols
    legend = "\n".join(table_legend(cols))
    assert legend.startswith("eval/all: the in-loop evaluation") and "\nfloor: goalposts the start model " \
        "itself is expected to solve in a fresh draw of k samples (floor_union: over all the run's checks)" in legend
    text = "\n".join(describe_run(h))
    assert "expected to solve 1.25 of them in a fresh draw of k samples and 5.00 over all the run's checks" in text
    assert "the union's 7 is above that floor" in text
    h[-1]["goalposts/solved_union"] = 5.0
    assert "the union's 5 is not above that floor" in "\n".join(describe_run(h))
