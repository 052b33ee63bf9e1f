"""`source_coverage`: per source, does any proposal hit a true lemma, and is the proposal nearest
the source's program (below similarity 1.0) one — the table of cases below is worked by hand."""

import pytest

from selfplay_core.toyworld.role_quality import source_coverage

CASES = [
    # (items, (sources, with a true lemma, nearest proposal is one))
    ([], (0, 0, 0)),
    ([("a", 0.9, True)], (1, 1, 1)),
    ([("a", 0.9, False)], (1, 0, 0)),
    # the true lemma is not the nearest: counted as covered, not as selectable
    ([("a", 0.95, False), ("a", 0.9, True)], (1, 1, 0)),
    # a copy (similarity 1.0) is never the nearest proposal, whatever its flag
    ([("a", 1.0, False), ("a", 0.8, True)], (1, 1, 1)),
    ([("a", 1.0, True)], (1, 1, 0)),
    # ties go to a true lemma: the most a similarity selector could do
    ([("a", 0.9, False), ("a", 0.9, True)], (1, 1, 1)),
    # two sources counted apart
    ([("a", 0.9, True), ("b", 0.7, False), ("b", 0.6, True), ("c", 0.5, False)], (3, 2, 1)),
]


@pytest.mark.parametrize("items,expected", CASES)
def test_source_coverage(items, expected):
    assert source_coverage(items) == expected
