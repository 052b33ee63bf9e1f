"""R-Zero's verifier and repetition penalty, as pure functions (table-tested in
tests/methods/test_rzero_formulas.py).

* Majority vote. The solver's m answers to a task are run in the sandbox on the task's inputs;
  the label of test t is the output most answers gave on it, among the answers that ran on it
  (ties: the output reached first, in answer order). An answer *agrees* when it ran on every
  labelled test and gave the label on each; p̂ = agreeing answers / m, so an answer that did not
  parse or crashed counts against the majority, as an unanswered question does in R-Zero.
* Repetition penalty. R-Zero clusters a batch of questions by BLEU distance (1 - BLEU,
  agglomerative, average linkage, merge below 0.5) and charges each question its cluster's share
  of the batch, r_rep = λ |C| / B (B: every question the Challenger was asked for). BLEU here is sentence BLEU-4 (uniform weights, brevity
  penalty) on lower-cased word/punctuation tokens, with epsilon smoothing (0.1 for an order with
  no match, as NLTK's method1 that R-Zero uses), made symmetric by averaging both directions:
  R-Zero's code scores one direction of each pair only, which makes the distance depend on the
  batch order.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Hashable, Sequence

from selfplay_core.values import Digest

NO_VOTE = None


def vote_key(value) -> Hashable | None:
    """What an output votes with: a canonical, hashable form of the value (types kept, so 1 and
    True or (1,) and [1] stay apart; sets and dicts in a sorted order, so equal ones vote
    together whatever their iteration order in the worker); None for an output that cannot vote
    (an opaque object, equal to nothing)."""
    try:
        return _canon(value)
    except _NoVote:
        return NO_VOTE


class _NoVote(Exception):
    pass


def _canon(v):
    t = type(v)
    if v is None or t in (bool, int, str, bytes, complex):
        return (t.__name__, v)
    if t is float:
        return ("float", repr(v + 0.0))          # -0.0 == 0.0; a NaN votes with a NaN
    if t is list or t is tuple:
        return (t.__name__, tuple(_canon(e) for e in v))
    if t is set or t is frozenset:
        return (t.__name__, tuple(sorted((_canon(e) for e in v), key=repr)))
    if t is dict:
        return ("dict", tuple(sorted(((_canon(k), _canon(x)) for k, x in v.items()), key=repr)))
    if t is Digest:
        return ("digest", v.hexdigest)
    raise _NoVote(t.__name__)                    # Opaque, or anything else


def majority_labels(runs: Sequence[Sequence[Hashable | None]]) -> list[Hashable | None]:
    """Per test, the most common vote key over the answers that ran on it (`runs[answer][test]`,
    None where that answer gave no output); None for a test no answer ran on."""
    if not runs:
        return []
    labels = []
    for t in range(len(runs[0])):
        votes = [r[t] for r in runs if r[t] is not NO_VOTE]
        if not votes:
            labels.append(NO_VOTE)
            continue
        counts = Counter(votes)
        best = max(counts.values())
        labels.append(next(v for v in votes if counts[v] == best))   # first to reach the top count
    return labels


def agreement(runs: Sequence[Sequence[Hashable | None]], labels: Sequence[Hashable | None]) -> list[bool]:
    """Per answer: it gave the label on every labelled test (tests without a label are skipped)."""
    tests = [t for t, lab in enumerate(labels) if lab is not NO_VOTE]
    return [bool(tests) and all(r[t] == labels[t] for t in tests) for r in runs]


# ---- BLEU and the repetition penalty ---------------------------------------------------------

_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def _ngrams(toks: list[str], n: int) -> Counter:
    return Counter(tuple(toks[i:i + n]) for i in range(len(toks) - n + 1))


def bleu(hyp: Sequence[str], ref: Sequence[str], max_n: int = 4, epsilon: float = 0.1) -> float:
    """Sentence BLEU of token list `hyp` against `ref`: BP * exp(mean_n log p_n) over orders
    1..min(max_n, len(hyp), len(ref)); p_n = clipped n-gram matches / hyp n-grams, with an order
    without matches counted as `epsilon` matches; BP = exp(1 - len(ref)/len(hyp)) when hyp is
    the shorter. 0 when either is empty."""
    hyp, ref = list(hyp), list(ref)
    if not hyp or not ref:
        return 0.0
    orders = min(max_n, len(hyp), len(ref))
    logs = 0.0
    for n in range(1, orders + 1):
        h, r = _ngrams(hyp, n), _ngrams(ref, n)
        matches = sum(min(c, r[g]) for g, c in h.items())
        logs += math.log((matches or epsilon) / sum(h.values()))
    bp = 1.0 if len(hyp) > len(ref) else math.exp(1.0 - len(ref) / len(hyp))
    return bp * math.exp(logs / orders)


def bleu_similarity(a: str, b: str) -> float:
    """Symmetric BLEU of two texts: the mean of both directions."""
    ta, tb = tokens(a), tokens(b)
    return 0.5 * (bleu(ta, tb) + bleu(tb, ta))


def average_linkage_clusters(dist: Sequence[Sequence[float]], threshold: float) -> list[int]:
    """Agglomerative clustering of a symmetric distance matrix with average linkage (scipy's
    UPGMA), cut so that only merges at a mean pairwise distance strictly below `threshold`
    happen. A cluster id per item: the index of its cluster's first member."""
    n = len(dist)
    if n < 2:
        return list(range(n))
    import numpy as np
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    condensed = squareform(np.asarray(dist, dtype=float), checks=False)
    # fcluster keeps merges at heights <= t; the rule is "< threshold", so cut just below it
    # (average linkage is monotone, so a cut height is a merge rule).
    labels = fcluster(linkage(condensed, method="average"),
                      t=float(np.nextafter(threshold, -np.inf)), criterion="distance")
    first: dict[int, int] = {}
    return [first.setdefault(int(lab), i) for i, lab in enumerate(labels)]


def repetition_penalties(texts: Sequence[str], threshold: float = 0.5, weight: float = 1.0,
                         batch_size: int | None = None) -> list[float]:
    """R-Zero's r_rep per text: weight * |its cluster| / B, clusters by BLEU distance. B is the
    batch the texts came from (default: the texts themselves); the Challenger's batch includes
    the proposals that never got a question, so one lone valid question is not charged 1."""
    n = len(texts)
    if n == 0:
        return []
    b = n if batch_size is None else batch_size
    if b < n:
        raise ValueError(f"batch_size {b} is smaller than the {n} texts clustered")
    sim = [[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            sim[i][j] = sim[j][i] = bleu_similarity(texts[i], texts[j])
    labels = average_linkage_clusters([[1.0 - s for s in row] for row in sim], threshold)
    size = Counter(labels)
    return [weight * size[c] / b for c in labels]
