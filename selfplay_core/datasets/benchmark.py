"""A loaded benchmark: its problems plus everything needed to say exactly what was evaluated.

Every loader returns a `BenchmarkSet`. Its `version` names the release (e.g. `release_v5`,
`v0.1.10`), `source_sha256` identifies the bytes that were read, and `content_hash` identifies the
problems after decoding and filtering (ids, inputs, expected outputs, comparison rules, prompts),
so two results can only be compared when their content hashes agree. Rows or tests that a loader
could not use are never dropped silently: they are recorded in `skipped` with a reason.
"""

from __future__ import annotations

import collections
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from selfplay_core.datasets.evalplus import file_sha256
from selfplay_core.problems import Problem


@dataclass
class Skipped:
    """One row (or part of one) a loader did not turn into a test."""

    where: str     # "file:line" or a problem id
    reason: str    # a short, stable reason (used for counting)
    detail: str = ""

    def to_json(self) -> dict:
        d = {"where": self.where, "reason": self.reason}
        if self.detail:
            d["detail"] = self.detail
        return d


@dataclass
class BenchmarkSet:
    name: str                      # humanevalplus | mbppplus | humaneval | mbpp | lcb
    version: str
    source: str                    # file path(s) or hub id
    source_sha256: str
    problems: list[Problem]
    skipped: list[Skipped] = field(default_factory=list)
    filters: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Ids that exist in the source but were filtered out (window, platform, ...): samples for
    # them are ignored and counted rather than rejected as unknown.
    excluded_ids: set[str] = field(default_factory=set)
    # Reference (canonical) programs by problem id, where the benchmark has them.
    references: dict[str, str] = field(default_factory=dict, repr=False)
    _content_hash: str | None = field(default=None, repr=False)

    @property
    def content_hash(self) -> str:
        if self._content_hash is None:
            self._content_hash = problems_hash(self.problems)
        return self._content_hash

    def by_id(self) -> dict[str, Problem]:
        return {p.id: p for p in self.problems}

    def skipped_counts(self) -> dict[str, int]:
        return dict(collections.Counter(s.reason for s in self.skipped))

    def describe(self) -> dict:
        """What every result must carry (the report's `dataset` section)."""
        return {
            "name": self.name,
            "version": self.version,
            "source": self.source,
            "source_sha256": self.source_sha256,
            "content_hash": self.content_hash,
            "n_problems": len(self.problems),
            "n_tests": sum(len(p.tests) for p in self.problems),
            "filters": self.filters,
            "skipped": self.skipped_counts(),
            "n_excluded_by_filters": len(self.excluded_ids),
            "notes": self.notes,
        }


def problems_hash(problems: list[Problem]) -> str:
    """sha256 over what decides a score: ids, kinds, entry points, tests, comparison rules and
    prompts. Time limits are left out on purpose: for evalplus sets they are derived from the
    canonical solution's timings on the local machine and would make the hash machine-specific."""
    h = hashlib.sha256()
    for p in sorted(problems, key=lambda p: p.id):
        d = p.to_json()
        d.pop("time_limit_s", None)
        d.pop("memory_limit_mb", None)
        d.pop("metadata", None)
        h.update(json.dumps(d, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


def files_sha256(paths: list[Path]) -> str:
    """sha256 of one file, or of the concatenated per-file digests of several."""
    digests = [file_sha256(p) for p in paths]
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("".join(digests).encode()).hexdigest()
