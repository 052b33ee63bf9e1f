import pytest

from selfplay_core.roles.common import Rejection
from selfplay_core.roles.guide import (GuideScores, guide_completion, guide_prompt, parse_guide)


def test_prompt_layout():
    p = guide_prompt("Given a list of numbers, sort the numbers in increasing order.",
                     "Given a list of numbers, reverse the list.", "def f(x):\n    x = x[::-1]\n    return x\n")
    assert p == ("### Target\nGiven a list of numbers, sort the numbers in increasing order.\n"
                 "### Proposal\nGiven a list of numbers, reverse the list.\n"
                 "### Solution\ndef f(x):\n    x = x[::-1]\n    return x\n### Review\n")


def test_completion_round_trips():
    s = GuideScores(relevance=3, redundancy=0, complexity=1, fidelity=1)
    text = guide_completion(s)
    assert text == "relevance: 3\nredundancy: 0\ncomplexity: 1\nfidelity: 1\n### End\n<|endoftext|>"
    assert parse_guide(text, require=("relevance", "redundancy", "complexity", "fidelity")) == s


@pytest.mark.parametrize("text,want", [
    ("relevance: 4\nredundancy: 1\ncomplexity: 2", (4, 1, 2, None)),
    ("**Relevance**: 4/5\nRedundancy = 0\nComplexity score: 3\n", (4, 0, 3, None)),
    ("Relevance is 2\nredundant: 1\ncomplexity: 0\nfaithful: 1", (2, 1, 0, 1)),
    ("relevance: 9\nredundancy: 3\ncomplexity: -2", (5, 1, 0, None)),      # clipped to the scales
    ("relevance: 2.6\nrelevance: 5\nredundancy: 0\ncomplexity: 1", (3, 0, 1, None)),  # first wins
    ("\n\n  relevance: 1\n\nsome words\nredundancy: 0\ncomplexity: 4\n### End\nrelevance: 5", (1, 0, 4, None)),
    ("relevance: 2\nredundancy: 0\ncomplexity: 1<|endoftext|>fidelity: 1", (2, 0, 1, None)),
])
def test_tolerant_parsing(text, want):
    got = parse_guide(text)
    assert isinstance(got, GuideScores)
    assert (got.relevance, got.redundancy, got.complexity, got.fidelity) == want


@pytest.mark.parametrize("text,reason", [
    ("", "empty"), ("   \n", "empty"), ("<|endoftext|>relevance: 3", "empty"),
    ("relevance: x\nredundancy: 0\ncomplexity: 1", "missing_relevance"),
    ("relevance: 3\ncomplexity: 1", "missing_redundancy"),
    ("relevance: 3\nredundancy: 0\ncomplexity: 1", "missing_fidelity"),   # when fidelity is required
])
def test_missing_judgments_are_rejections(text, reason):
    require = ("relevance", "redundancy", "complexity", "fidelity") if reason == "missing_fidelity" else \
        ("relevance", "redundancy", "complexity")
    got = parse_guide(text, require=require)
    assert isinstance(got, Rejection) and got.reason == reason


def test_nothing_required_accepts_a_partial_review():
    assert parse_guide("fidelity: 0", require=()) == GuideScores(fidelity=0)


def test_the_code_guide_prompt_names_the_three_scales_and_the_parser_reads_its_answer_format(tmp_path):
    import pytest

    from selfplay_core.roles.guide import GuideScores, load_prompt_template, parse_guide, render_guide_prompt

    tpl = load_prompt_template("code")
    text = render_guide_prompt(tpl, "Count islands in a grid.", "Count 1s in a list.", "def f(x):\n    return x.count(1)\n")
    assert "Count islands in a grid." in text and "Count 1s in a list." in text and "return x.count(1)" in text
    for scale in ("relevance (0-5)", "redundancy (0 or 1)", "complexity (0-4)"):
        assert scale in text
    # the answer the prompt asks for, as a chat model tends to write it
    assert parse_guide("relevance: 4\nredundancy: 0\ncomplexity: 1\n\nThe problem is a good step.") == \
        GuideScores(relevance=4, redundancy=0, complexity=1)
    assert load_prompt_template("toy") is None
    own = tmp_path / "guide.txt"
    own.write_text("T {target} Q {question}")
    with pytest.raises(ValueError, match=r"\{code\} are missing"):
        load_prompt_template(str(own))
    with pytest.raises(ValueError, match="not 'toy', 'code' or a readable file"):
        load_prompt_template(str(tmp_path / "none.txt"))
