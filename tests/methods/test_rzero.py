"""R-Zero's formulas as tables (expected values computed by hand from DESIGN.md §1 and the
R-Zero paper), and its verifier — the Solver's majority vote, run in the sandbox — on answers
whose outputs are known by hand."""

import math

import pytest

from selfplay_core import rewards
from selfplay_core.config import load_config
from selfplay_core.engines.base import Completion
from selfplay_core.methods import method_for
from selfplay_core.methods.rzero import ChallengerReward, RZero, RZeroRound, challenger_groups
from selfplay_core.methods.rzero_votes import (agreement, average_linkage_clusters, bleu,
                                               bleu_similarity, majority_labels,
                                               repetition_penalties, tokens, vote_key)
from selfplay_core.problems import Problem
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.rl.advantages import ESTIMATORS
from selfplay_core.rl.rollout import Rollout
from selfplay_core.roles.rzero import parse_challenger
from selfplay_core.run_context import RunContext
from selfplay_core.toyworld.world import ToyOracle
from selfplay_core.values import Digest, Opaque

# ---- the Challenger's reward -----------------------------------------------------------------

@pytest.mark.parametrize("p_hat,r_rep,expected", [
    (0.5, 0.0, 1.0),          # half agree: peak uncertainty
    (0.3, 0.1, 0.5),          # 1 - 0.4 - 0.1
    (0.9, 0.0, 0.2),          # 1 - 0.8
    (1.0, 0.0, 0.0),          # everyone agrees: no uncertainty
    (0.0, 0.0, 0.0),
    (0.5, 0.75, 0.25),
    (0.2, 0.5, 0.0),          # 1 - 0.6 - 0.5 < 0: floored
])
def test_challenger_reward(p_hat, r_rep, expected):
    assert rewards.rzero_challenger(p_hat, r_rep) == pytest.approx(expected)


def test_challenger_reward_refuses_bad_input():
    with pytest.raises(ValueError, match="pass rate"):
        rewards.rzero_challenger(1.5, 0.0)
    with pytest.raises(ValueError, match="repetition penalty"):
        rewards.rzero_challenger(0.5, -0.1)


# ---- the majority vote -----------------------------------------------------------------------

def test_majority_labels_and_agreement():
    # runs[answer][test]; None: that answer gave no output on that test
    runs = [[1, 2, 3],
            [1, 2, 4],
            [1, 5, 4],
            [None, 2, 4],
            [7, None, None]]
    labels = majority_labels(runs)
    assert labels == [1, 2, 4]             # votes: {1: 3, 7: 1}, {2: 3, 5: 1}, {4: 3, 3: 1}
    # only answer 1 gives every label; answer 3 crashed on test 0, so it does not agree
    assert agreement(runs, labels) == [False, True, False, False, False]


def test_a_tie_goes_to_the_output_reached_first_and_a_test_nobody_ran_has_no_label():
    assert majority_labels([["x"], ["y"], ["y"], ["x"]]) == ["x"]
    assert majority_labels([["y"], ["x"], ["x"], ["y"]]) == ["y"]
    runs = [[None, 1], [None, 1], [None, 2]]
    assert majority_labels(runs) == [None, 1]
    assert agreement(runs, [None, 1]) == [True, True, False]   # the unlabelled test is skipped
    assert agreement([[None], [None]], [None]) == [False, False]  # nothing labelled: nobody agrees


def test_vote_keys_compare_values_as_data():
    assert vote_key({1, 2}) == vote_key({2, 1})
    assert vote_key({"a": 1, "b": 2}) == vote_key({"b": 2, "a": 1})
    assert vote_key(1) != vote_key(True) and vote_key((1,)) != vote_key([1])
    assert vote_key(-0.0) == vote_key(0.0) and vote_key(float("nan")) == vote_key(float("nan"))
    assert vote_key(Digest("ab")) == vote_key(Digest("ab")) != vote_key(Digest("cd"))
    assert vote_key(Opaque("Foo")) is None and vote_key([Opaque("Foo")]) is None


# ---- BLEU, clustering, the repetition penalty ------------------------------------------------

def test_bleu_by_hand():
    # equal lengths: p1..p4 = 4/5, 3/4, 2/3, 1/2, BP 1 -> (1/5)^(1/4); symmetric
    a, b = "a b c d e", "a b c d f"
    assert bleu(tokens(a), tokens(b)) == pytest.approx(0.2 ** 0.25)
    assert bleu_similarity(a, b) == pytest.approx(0.2 ** 0.25)
    # a 3-token hypothesis: orders 1..3 all match, BP = exp(1 - 4/3); the other way round
    # p = 3/4, 2/3, 1/2 -> (1/4)^(1/3), BP 1; the similarity is their mean
    assert bleu(tokens("a b c"), tokens("a b c d")) == pytest.approx(math.exp(-1 / 3))
    assert bleu(tokens("a b c d"), tokens("a b c")) == pytest.approx(0.25 ** (1 / 3))
    assert bleu_similarity("a b c", "a b c d") == pytest.approx((math.exp(-1 / 3) + 0.25 ** (1 / 3)) / 2)
    # no bigram (or longer) in common: epsilon 0.1 matches -> (1 * 0.1/3 * 0.1/2 * 0.1/1)^(1/4)
    assert bleu(tokens("a b c d"), tokens("a c b d")) == pytest.approx((0.1 / 3 * 0.05 * 0.1) ** 0.25)
    assert bleu([], ["a"]) == 0.0
    assert tokens("Given a list, sort it.") == ["given", "a", "list", ",", "sort", "it", "."]


def test_average_linkage_clustering_by_hand():
    d = [[0.0, 0.1, 0.6, 0.9],
         [0.1, 0.0, 0.3, 0.9],
         [0.6, 0.3, 0.0, 0.8],
         [0.9, 0.9, 0.8, 0.0]]
    # {0,1} first (0.1); then {0,1} to 2 averages (0.6 + 0.3) / 2 = 0.45 < 0.5; 3 is >= 0.8 away
    assert average_linkage_clusters(d, 0.5) == [0, 0, 0, 3]
    # below 0.45 the second merge does not happen (single linkage would merge at 0.3)
    assert average_linkage_clusters(d, 0.4) == [0, 0, 2, 3]
    assert average_linkage_clusters(d, 0.05) == [0, 1, 2, 3]


def test_repetition_penalty_is_the_cluster_share_of_the_batch():
    texts = ["a b c d e", "a b c d f", "x y z w v", "p q r s t"]
    # BLEU(0, 1) = 0.669 -> distance 0.331 < 0.5: one cluster of 2; the others share no token
    assert repetition_penalties(texts) == pytest.approx([0.5, 0.5, 0.25, 0.25])
    assert repetition_penalties(texts, weight=0.5) == pytest.approx([0.25, 0.25, 0.125, 0.125])
    assert repetition_penalties(texts, threshold=0.3) == pytest.approx([0.25] * 4)
    assert repetition_penalties(texts, batch_size=8) == pytest.approx([0.25, 0.25, 0.125, 0.125])
    assert repetition_penalties([]) == []
    with pytest.raises(ValueError, match="smaller"):
        repetition_penalties(texts, batch_size=3)


def _accepted(question, p_hat):
    p = Proposal("rzero", Anchor("s", "", ""), "f", "harder", "", Completion(""),
                 parsed=parse_challenger(f"### Task\n{question}\n### Inputs\n1\n2\n3\n4\n"))
    p.problem, p.pass_rate = Problem("t", "call", [], entry_point="f"), p_hat
    return p


def test_challenger_reward_over_a_batch():
    reward = ChallengerReward(0.5, 1.0, (0.3, 0.7), batch_size=4)
    acc = [_accepted(q, p) for q, p in zip(["a b c d e", "a b c d f", "x y z w v", "p q r s t"],
                                            [0.5, 0.3, 0.5, 1.0])]
    # 1 - 2|p - 1/2| - r_rep: 1 - 0 - 0.5, 1 - 0.4 - 0.5, 1 - 0 - 0.25, max(0, 1 - 1 - 0.25)
    assert reward(None, acc) == pytest.approx([0.5, 0.1, 0.75, 0.0])
    assert reward.metrics(acc) == pytest.approx({"repetition": 1.5 / 4, "uncertainty": (1 + 0.6 + 1 + 0) / 4,
                                                 "in_band": 0.75})
    # B = 8 Challenger samples, four of them valid: the cluster of two costs 2/8
    assert ChallengerReward(0.5, 1.0, (0.3, 0.7), batch_size=8)(None, acc) == pytest.approx(
        [0.75, 0.35, 0.875, 0.0])


def test_the_challenger_is_normalised_over_the_samples_of_its_prompt():
    def roll(role, reward, group, prompt):
        return Rollout(list(prompt), [5], [-1.0], 0.0, role, {"kind": "rzero", "group": group,
                                                             "reward": reward, "passed": None})
    rolls = [roll("teacher", 1.0, "p1", (1, 2)), roll("teacher", 0.0, "p2", (1, 2)),
             roll("teacher", 0.5, "p3", (3,)),
             roll("student", 1.0, "t", (9,)), roll("student", 0.0, "t", (9,))]
    adv = ESTIMATORS["grpo"](challenger_groups(rolls))
    # prompt (1, 2): rewards 1, 0 -> +-1 (std 0.5); prompt (3,): one sample, no signal; task t: +-1
    assert adv == pytest.approx([1.0, -1.0, 0.0, 1.0, -1.0], abs=1e-5)
    method = method_for(load_config(None, ["method=r-zero"]).method)
    assert isinstance(method, RZero) and method.advantages(None, rolls) == pytest.approx(adv)


# ---- the Challenger's parser -----------------------------------------------------------------

def test_the_challenger_parser_keeps_question_header_and_inputs_and_drops_any_program():
    text = ("### Task\nGiven two numbers, add them.\n### Solution\ndef f(a, b):\n    return a - b\n"
            "### Inputs\n(1, 2)\n(3, 4)\n5\n(1, 2)\n### End\n")
    t = parse_challenger(text, min_inputs=2)
    assert t.question == "Given two numbers, add them." and t.signature == "def f(a, b):"
    assert t.inputs == [[1, 2], [3, 4]] and t.code == ""     # a 1-tuple line and a repeat dropped
    # no Solution section, or a body that does not parse: posed as def f(x)
    t = parse_challenger("### Task\nDouble it.\n### Inputs\n1\n2\n", min_inputs=2)
    assert t.signature == "def f(x):" and t.inputs == [[1], [2]]
    t = parse_challenger("### Task\nq\n### Solution\ndef f(x):\n    return (\n### Inputs\n1\n2\n", min_inputs=2)
    assert t.signature == "def f(x):"
    assert parse_challenger("### Task\nq\n### Inputs\n1\n", min_inputs=2).reason == "too_few_inputs"
    assert parse_challenger("### Inputs\n1\n2\n").reason == "missing_task"
    assert parse_challenger("### Task\nq\n### Solution\ndef f(*a):\n    pass\n### Inputs\n1\n2\n").reason == "bad_signature"


# ---- the vote in the sandbox -----------------------------------------------------------------

ODD = "Given a list of numbers, keep the odd numbers. Return the numbers as a comma-separated string."
INPUTS = "[1, 2, 3]\n[4]\n[5, 7]\n[2, 9, 10]\n"
RIGHT = "    x = [v for v in x if v % 2 == 1]\n    x = ','.join(str(v) for v in x)\n    return x\n"
WRONG = "    x = x[:5]\n    x = ','.join(str(v) for v in x)\n    return x\n"
CRASH = "    return 1 / 0\n"
CONST = "    return 0\n"


class ScriptedSolver:
    """Hands back fixed answers per question, so the vote's outcome is known by hand (the
    engine is the one scripted part; the answers run in the real sandbox)."""

    def __init__(self, answers):
        self.answers = answers

    def generate(self, prompts, n, sampling):
        out = []
        for prompt in prompts:
            q = prompt.split("\n")[1]
            texts = self.answers[q]
            assert len(texts) == n
            out.append([Completion(t) for t in texts])
        return out


def _challenger(question, inputs=INPUTS):
    text = f"### Task\n{question}\n### Solution\ndef f(x):\n    return x\n### Inputs\n{inputs}### End\n"
    return Proposal("rzero", Anchor("s", "", ""), "f", "harder", "", Completion(text), id=question[:12])


def test_the_vote_labels_tests_by_the_majority_of_answers_run_in_the_sandbox(executor):
    cfg = load_config(None, ["method=r-zero"])
    answers = {
        ODD: [RIGHT] * 6 + [WRONG] * 3 + [CRASH],                 # majority right: p̂ = 6/10
        "Given a list of numbers, negate it.": [WRONG] * 7 + [RIGHT] * 3,   # majority wrong: 7/10
        "Return zero.": [CONST] * 10,                                    # one label for every test
        "Crash.": [CRASH] * 9 + ["oops("],                                # nothing ran
    }
    ctx = RunContext(cfg, executor=executor, engine=ScriptedSolver(answers), oracle=ToyOracle())
    props = [_challenger(q) for q in answers] + [_challenger("Too few.", "[1]\n")]
    rnd, log = RZeroRound(cfg.method), IterationLog()
    rnd.validate(ctx, props, log)
    rnd.estimate(ctx, props, log)
    odd, neg, zero, crash, few = props
    assert [p.rejection for p in props] == [None, None, "degenerate_outputs", "no_majority",
                                            "parse_too_few_inputs"]
    assert [tc.expected for tc in odd.problem.tests] == ["1,3", "", "5,7", "9"]
    assert [tc.expected for tc in neg.problem.tests] == ["1,2,3", "4", "5,7", "2,9,10"]
    assert (odd.pass_rate, neg.pass_rate) == (0.6, 0.7)
    assert odd.solve.passed == [True] * 6 + [False] * 4 and odd.solve.rejections[-1] == "runtime_error"
    assert log.metrics["teacher/rzero/accepted"] == 2 and log.metrics["rejections/rzero/no_majority"] == 1
    assert log.metrics["student/rzero/ran"] == pytest.approx(19 / 20)

    # The diagnostic: the toy world's truth for both questions is "keep the odd numbers"
    # for ODD; "negate it" is no toy description, so it has no truth. ODD's labels are right.
    rnd.diagnose(ctx, props, log)
    assert log.metrics["teacher/rzero/truth_share"] == 0.5
    assert log.metrics["teacher/rzero/label_accuracy"] == 1.0
    assert log.metrics["teacher/rzero/test_label_accuracy"] == 1.0


def test_label_accuracy_counts_a_wrong_majority(executor):
    cfg = load_config(None, ["method=r-zero"])
    answers = {ODD: [WRONG] * 7 + [RIGHT] * 3}
    ctx = RunContext(cfg, executor=executor, engine=ScriptedSolver(answers), oracle=ToyOracle())
    props = [_challenger(ODD)]
    rnd, log = RZeroRound(cfg.method), IterationLog()
    for hook in (rnd.validate, rnd.estimate, rnd.diagnose):
        hook(ctx, props, log)
    # labels "1,2,3", "4", "5,7", "2,9,10" against the truth "1,3", "", "5,7", "9": one of four
    assert log.metrics["teacher/rzero/label_accuracy"] == 0.0
    assert log.metrics["teacher/rzero/test_label_accuracy"] == 0.25


PARITY_TEXTS = [
    "given a list of integers , return the sum of the even ones .",
    "given a list of integers , return the sum of the odd ones .",
    "sort the list in reverse order and take the first three items .",
    "return the largest digit of the number , or zero when it is negative .",
    "given a string , count the vowels in it and return the count .",
    "given a list of integers , return the sum of its even elements .",
]


@pytest.mark.parametrize("i,j", [(i, j) for i in range(len(PARITY_TEXTS))
                                 for j in range(len(PARITY_TEXTS)) if i != j])
def test_bleu_equals_nltk_sentence_bleu_with_method1(i, j):
    """Our BLEU is NLTK's sentence_bleu (uniform 4-gram weights, smoothing method1 with
    epsilon 0.1: the variant R-Zero uses) on texts of four tokens or more."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    hyp, ref = tokens(PARITY_TEXTS[i]), tokens(PARITY_TEXTS[j])
    want = sentence_bleu([ref], hyp, smoothing_function=SmoothingFunction(epsilon=0.1).method1)
    assert bleu(hyp, ref) == pytest.approx(want, rel=1e-9)


def test_clustering_matches_a_brute_force_average_linkage_on_random_matrices():
    """scipy's UPGMA cut below the threshold equals the textbook loop (merge the closest pair of
    clusters while their mean pairwise distance is below the threshold)."""
    import random

    def brute(dist, threshold):
        clusters = [[i] for i in range(len(dist))]
        while len(clusters) > 1:
            best = min(((sum(dist[i][j] for i in a for j in b) / (len(a) * len(b)), x, y)
                        for x, a in enumerate(clusters) for y, b in enumerate(clusters) if x < y))
            if best[0] >= threshold:
                break
            _, x, y = best
            clusters[x] = sorted(clusters[x] + clusters[y])
            del clusters[y]
        out = [0] * len(dist)
        for members in clusters:
            for i in members:
                out[i] = members[0]
        return out

    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 9)
        d = [[0.0] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                d[i][j] = d[j][i] = round(rng.random(), 3)
        t = rng.choice([0.2, 0.5, 0.8])
        assert average_linkage_clusters(d, t) == brute(d, t), (d, t)
