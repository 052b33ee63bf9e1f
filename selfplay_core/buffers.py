"""Task buffers with provenance, and the similarity gate used for rejection sampling.

The default embedder needs no download: signed feature hashing of character n-grams of the
question and code (whitespace-normalized), L2-normalized, so cosine similarity is a dot
product. It catches the near-duplicates that matter here (renamed variables, reworded text,
reordered literals shift few n-grams) at a few microseconds per proposal. Any other embedder
(e.g. the policy's hidden states) can be passed in as a callable.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

import numpy as np

from selfplay_core.values import from_json_obj, to_json_obj

Embedder = Callable[[list[str]], np.ndarray]


def hashed_ngram_embedder(dim: int = 4096, ngrams: tuple[int, ...] = (3, 4, 5)) -> Embedder:
    def embed(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for row, text in enumerate(texts):
            t = re.sub(r"\s+", " ", text.strip().lower())
            for n in ngrams:
                for i in range(max(0, len(t) - n + 1)):
                    h = zlib.crc32(t[i:i + n].encode())
                    out[row, h % dim] += 1.0 if (h >> 31) & 1 else -1.0
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out
    return embed


@dataclass
class BufferItem:
    """An accepted task with where it came from."""

    id: str
    kind: str                        # lemma | lift | medium | hard | deduction | abduction | ...
    question: str
    code: str
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    iteration: int = 0
    goalpost_id: str | None = None
    parent_id: str | None = None
    axis: str | None = None
    pass_rate: float | None = None
    extra: dict = field(default_factory=dict)

    def text(self) -> str:
        """What the similarity gate compares: question and code, or `extra["text"]` when the
        task is more than that (an AZR triplet is its program and its input)."""
        return self.extra.get("text") or f"{self.question}\n{self.code}"

    def to_json(self) -> dict:
        d = asdict(self)
        d["inputs"], d["outputs"] = to_json_obj(self.inputs), to_json_obj(self.outputs)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "BufferItem":
        d = dict(d)
        d["inputs"], d["outputs"] = from_json_obj(d["inputs"]), from_json_obj(d["outputs"])
        return cls(**d)


class TaskBuffer:
    """An append-only buffer with a similarity index over its items."""

    def __init__(self, embedder: Embedder | None = None, threshold: float = 0.95):
        self.embedder = embedder or hashed_ngram_embedder()
        self.threshold = threshold
        self.items: list[BufferItem] = []
        self._vecs: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def nearest(self, text: str, kinds: Iterable[str] | None = None) -> tuple[float, BufferItem | None]:
        """Highest cosine similarity of `text` to any item (of one of `kinds`, when given), and
        that item."""
        rows = list(range(len(self.items)))
        if kinds is not None:
            kinds = set(kinds)
            rows = [i for i in rows if self.items[i].kind in kinds]
        if not rows:
            return 0.0, None
        v = self.embedder([text])[0]
        sims = self._vecs[rows] @ v
        j = int(np.argmax(sims))
        return float(sims[j]), self.items[rows[j]]

    def is_near_duplicate(self, text: str, extra: Iterable[str] = (),
                          kinds: Iterable[str] | None = None) -> tuple[bool, float]:
        """Whether `text` is at least `threshold`-similar to the buffer (its items of `kinds`,
        when given) or to `extra` texts (the rest of the current batch)."""
        best, _ = self.nearest(text, kinds)
        extra = list(extra)
        if extra:
            v = self.embedder([text])[0]
            best = max(best, float(np.max(self.embedder(extra) @ v)))
        return best >= self.threshold, best

    def add(self, item: BufferItem) -> None:
        v = self.embedder([item.text()])
        self._vecs = v if self._vecs is None else np.vstack([self._vecs, v])
        self.items.append(item)

    def diversity(self, max_items: int = 256) -> float:
        """Mean pairwise cosine distance of the latest items (0 = all identical)."""
        if len(self.items) < 2:
            return 0.0
        v = self._vecs[-max_items:]
        sims = v @ v.T
        n = len(v)
        return float(1.0 - (sims.sum() - np.trace(sims)) / (n * (n - 1)))

    def to_json(self) -> list[dict]:
        return [it.to_json() for it in self.items]

    @classmethod
    def from_json(cls, rows: list[dict], embedder: Embedder | None = None,
                  threshold: float = 0.95) -> "TaskBuffer":
        buf = cls(embedder, threshold)
        for r in rows:
            buf.add(BufferItem.from_json(r))
        return buf
