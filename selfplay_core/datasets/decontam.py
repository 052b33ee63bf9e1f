"""Decontamination: is a proposed question (nearly) an evaluation-set item?

Word n-gram overlap, as used for training-set decontamination since GPT-3: texts are
lower-cased and split into alphanumeric words; each evaluation document is indexed by its
distinct word n-grams (default n = 8). For a proposal we count the n-grams it shares with each
document and score

    overlap = shared / min(|grams(proposal)|, |grams(document)|)

i.e. the larger of "how much of the proposal is in the document" and "how much of the document
is in the proposal", so both a copied fragment and a copy with additions are caught. A proposal
is contaminated when its best overlap reaches the threshold. A query costs one dictionary lookup
per n-gram plus the length of the matching posting lists: thousands of proposals against all
evaluation sets take well under a second each.

Texts with fewer than n words have no n-grams and cannot be judged (score 0, `too_short`).
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def ngram_keys(text: str, n: int) -> set[int]:
    """Distinct word n-grams of `text`, hashed (stable within a process)."""
    w = words(text)
    return {hash(tuple(w[i:i + n])) for i in range(len(w) - n + 1)}


@dataclass(frozen=True)
class Match:
    contaminated: bool
    score: float              # best overlap in [0, 1]
    closest_id: str | None    # the evaluation item with the best overlap
    shared: int               # n-grams shared with it
    n_grams: int              # the proposal's distinct n-grams
    too_short: bool = False

    def to_json(self) -> dict:
        return {"contaminated": self.contaminated, "score": round(self.score, 4),
                "closest_id": self.closest_id, "shared": self.shared, "n_grams": self.n_grams,
                **({"too_short": True} if self.too_short else {})}


class Decontaminator:
    """An n-gram index over evaluation texts ({id: text})."""

    def __init__(self, docs: Mapping[str, str], *, n: int = 8, threshold: float = 0.5):
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.n, self.threshold = n, threshold
        self.ids: list[str] = []
        self.sizes: list[int] = []
        self.index: dict[int, list[int]] = collections.defaultdict(list)
        for doc_id, text in docs.items():
            keys = ngram_keys(text or "", n)
            if not keys:
                continue
            j = len(self.ids)
            self.ids.append(str(doc_id))
            self.sizes.append(len(keys))
            for k in keys:
                self.index[k].append(j)
        self.index = dict(self.index)

    @classmethod
    def from_benchmarks(cls, benches: Iterable, **kw) -> "Decontaminator":
        """Index the problem statements of loaded `BenchmarkSet`s, ids as 'name:problem_id'."""
        docs = {f"{b.name}:{p.id}": p.prompt or "" for b in benches for p in b.problems}
        return cls(docs, **kw)

    def __len__(self) -> int:
        return len(self.ids)

    def check(self, text: str) -> Match:
        keys = ngram_keys(text or "", self.n)
        if not keys:
            return Match(False, 0.0, None, 0, 0, too_short=True)
        hits: collections.Counter = collections.Counter()
        for k in keys:
            for j in self.index.get(k, ()):
                hits[j] += 1
        best, best_j, best_shared = 0.0, None, 0
        for j, shared in hits.items():
            score = shared / min(len(keys), self.sizes[j])
            if score > best or (score == best and shared > best_shared):
                best, best_j, best_shared = score, j, shared
        return Match(best >= self.threshold, best, self.ids[best_j] if best_j is not None else None,
                     best_shared, len(keys))

    def check_many(self, texts: Iterable[str]) -> list[Match]:
        return [self.check(t) for t in texts]
