"""Decontamination: n-gram overlap against the evaluation sets."""


import pytest

from selfplay_core.datasets.decontam import Decontaminator, words
from selfplay_core.datasets.livecodebench import load_lcb


@pytest.fixture(scope="module")
def lcb():
    return load_lcb(window="test")


@pytest.fixture(scope="module")
def index(lcb):
    return Decontaminator.from_benchmarks([lcb], n=8, threshold=0.5)


def test_verbatim_copy_is_caught_with_its_id(lcb, index):
    p = lcb.problems[10]
    m = index.check(p.prompt)
    assert m.contaminated and m.score == 1.0 and m.closest_id == f"lcb:{p.id}"


def test_reformatted_fragment_and_copy_with_additions_are_caught(lcb, index):
    p = next(q for q in lcb.problems if len(words(q.prompt)) > 120)
    w = words(p.prompt)
    fragment = " ".join(w[20:80]).upper() + "!!"              # case and punctuation do not matter
    padded = "Consider this new task. " + p.prompt + " " + "Also print the answer twice. " * 30
    for text in (fragment, padded):
        m = index.check(text)
        assert m.contaminated and m.closest_id == f"lcb:{p.id}", text[:60]


def test_unrelated_and_short_texts_are_not_flagged(index):
    m = index.check("Write a function that returns the number of vowels in a string, counting "
                    "both upper and lower case letters, and ignoring every other character.")
    assert not m.contaminated and m.score < 0.5
    short = index.check("Add two numbers.")
    assert short.too_short and not short.contaminated and short.n_grams == 0


def test_threshold_decides_and_closest_match_is_reported():
    idx = Decontaminator({"a": "one two three four five six", "b": "red green blue yellow black white"},
                         n=3, threshold=0.6)
    m = idx.check("one two three four nine ten")       # 2 of its 4 trigrams are in 'a'
    assert (m.closest_id, m.shared, m.n_grams, m.score, m.contaminated) == ("a", 2, 4, 0.5, False)
    assert Decontaminator({"a": "one two three four five six"}, n=3, threshold=0.5).check(
        "one two three four nine ten").contaminated
    with pytest.raises(ValueError):
        Decontaminator({}, threshold=0)


def test_thousands_of_proposals_are_each_matched_to_their_source(lcb):
    # Speed is not asserted here (it depends on the machine's load); the index's answers are.
    idx = Decontaminator.from_benchmarks([load_lcb(window="all")], n=8)
    proposals = [p.prompt[: 400 + i % 300] + f" variant {i}" for i, p in enumerate(lcb.problems * 11)]
    matches = idx.check_many(proposals[:2000])
    assert len(matches) == 2000 and sum(m.contaminated for m in matches) == 2000
    # Each is matched to an item whose text it copies (some items share a long opening, so the
    # copied one is not always the only one that qualifies).
    # Compared on whitespace-split words, without the last one (the cut may split it).
    def text(t):
        return " ".join(t.split())

    prompts = {f"lcb:{p.id}": text(p.prompt) for p in load_lcb(window="all").problems}
    copied = [text(" ".join(p.prompt[: 400 + i % 300].split()[:-1]))
              for i, p in enumerate(lcb.problems * 11)][:2000]
    assert all(prompts[m.closest_id].startswith(c) for m, c in zip(matches, copied))
