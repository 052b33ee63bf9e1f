"""Line similarity of two programs (GASP x code relevance's judge): values worked out by hand
from the LCS of their normalised lines."""

import pytest

from selfplay_core.code_relevance import code_lines, lcs_length, line_similarity, relevance_weight

GOAL = """def f(x):
    x = [int(t) for t in x.split(',') if t]
    x = [v for v in x if v < 7]
    x = [v % 9 for v in x]
    x = sorted(x)
    x = ','.join(str(v) for v in x)
    return x
"""   # 7 lines

ONE_REMOVED = GOAL.replace("    x = sorted(x)\n", "")                      # 6 lines, all in GOAL
DRIFTED = ONE_REMOVED.replace("v < 7", "v < 9")                           # a constant changed too
CHANGED = GOAL.replace("v < 7", "v < 9")                                  # one line changed
REORDERED = GOAL.replace("    x = [v for v in x if v < 7]\n    x = [v % 9 for v in x]\n",
                         "    x = [v % 9 for v in x]\n    x = [v for v in x if v < 7]\n")


@pytest.mark.parametrize("proposal, expected", [
    (GOAL, 1.0),
    (ONE_REMOVED, 2 * 6 / 13),            # LCS 6 of 7 + 6 lines
    (CHANGED, 2 * 6 / 14),                # one line differs on each side
    (DRIFTED, 2 * 5 / 13),                # a step removed and a constant changed
    (REORDERED, 2 * 6 / 14),              # two lines swapped: the LCS keeps one of them
    ("", 0.0),
])
def test_line_similarity_is_dice_over_the_lcs_of_lines(proposal, expected):
    assert line_similarity(GOAL, proposal) == pytest.approx(expected)


def test_whitespace_blank_lines_and_comments_do_not_count():
    noisy = "# a lemma\n" + GOAL.replace("    x = sorted(x)\n", "\n  # sorted no more\n").replace("    ", "\t")
    assert code_lines(noisy) == code_lines(ONE_REMOVED)
    assert line_similarity(GOAL, noisy) == pytest.approx(2 * 6 / 13)


def test_lcs_of_line_lists():
    assert lcs_length(list("abcbdab"), list("bdcaba")) == 4   # the textbook example: "bcba"
    assert lcs_length([], ["a"]) == 0
    assert lcs_length(["a", "b"], ["b", "a"]) == 1


def test_the_weight_is_a_power_of_the_similarity_and_zero_for_a_copy():
    assert relevance_weight(line_similarity(GOAL, ONE_REMOVED), power=4) == pytest.approx((12 / 13) ** 4)
    assert relevance_weight(line_similarity(GOAL, DRIFTED)) == pytest.approx(10 / 13)
    # the same lines (whitespace aside) are no variant: a copied lemma is not a lift
    assert line_similarity(GOAL, GOAL.replace("    ", "  ")) == 1.0
    assert relevance_weight(line_similarity(GOAL, GOAL.replace("    ", "  "))) == 0.0
    with pytest.raises(ValueError, match="power"):
        relevance_weight(line_similarity(GOAL, ONE_REMOVED), power=0)


@pytest.mark.parametrize("program, expected", [
    (GOAL.replace("    ", "  "), "same_lines"),
    (CHANGED, "one_constant"),                                       # v < 7 -> v < 9
    (GOAL.replace("v % 9", "v * 9"), "one_line_changed"),            # another operation
    (ONE_REMOVED, "one_line_dropped"),
    (GOAL.replace("    return x", "    x = x[::-1]\n    return x"), "one_line_added"),
    (DRIFTED, "two_to_four_edits"),                                  # 2 dropped + 1 added
    (REORDERED, "one_line_moved"),                                   # two steps swapped
    ("def f(x):\n    return 0\n", "further"),                        # 5 dropped + 1 added
])
def test_edit_classes(program, expected):
    from selfplay_core.code_relevance import edit_class

    assert edit_class(GOAL, program) == expected
