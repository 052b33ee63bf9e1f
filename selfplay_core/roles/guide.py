"""The Guide role (SGS): a judge of one proposed problem against the unsolved target it was
written for.

Judgments (SGS): **relevance** 0-5 (how much of the target the proposal exercises),
**redundancy** 0/1 (the proposal contains steps or conditions that do nothing), **complexity**
0-4 (how convoluted it is; SGS gives no guide reward at 3 or more). The toy world adds
**fidelity** 0/1 (does the question describe the reference program?), which a tiny model can
check line by line and which decides whether a proposal is worth training on.

Prompt (the toy world's; plain text, so a tiny model and a base LLM read the same layout):

    ### Target
    <target question>
    ### Proposal
    <proposal question>
    ### Solution
    <proposal reference program>
    ### Review

Completion:

    relevance: 3
    redundancy: 0
    complexity: 1
    fidelity: 1
    ### End

The parser is tolerant: header case, `=` or `:`, a trailing `/5`, extra words and blank lines are
accepted; a value out of range is clipped; the first occurrence of a key wins. A judgment that
is missing (or not a number) is a `Rejection` only when the caller requires it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from selfplay_core.roles.common import END_OF_TEXT, Rejection, cut_at

TARGET_HEADER = "### Target"
PROPOSAL_HEADER = "### Proposal"
SOLUTION_HEADER = "### Solution"
REVIEW_HEADER = "### Review"
END_HEADER = "### End"
STOP = (END_OF_TEXT, END_HEADER)

# key -> (low, high): the SGS scales, plus the toy world's fidelity.
RANGES = {"relevance": (0, 5), "redundancy": (0, 1), "complexity": (0, 4), "fidelity": (0, 1)}
KEYS = tuple(RANGES)
SGS_KEYS = ("relevance", "redundancy", "complexity")
REASONS = ("empty", "parser_error") + tuple(f"missing_{k}" for k in KEYS)

_LINE = re.compile(r"^\W*(relevance|redundancy|redundant|complexity|fidelity|faithful)\b"
                   r"(?:\s*score)?[^\w\-]*(?:is\s+)?(-?\d+(?:\.\d+)?)", re.I)
_ALIASES = {"redundant": "redundancy", "faithful": "fidelity"}


@dataclass(frozen=True)
class GuideScores:
    relevance: int | None = None
    redundancy: int | None = None
    complexity: int | None = None
    fidelity: int | None = None

    def __bool__(self) -> bool:  # parsed (a Rejection is falsy)
        return True

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in KEYS}


def guide_prompt(target: str, question: str, code: str) -> str:
    return (f"{TARGET_HEADER}\n{target.strip()}\n{PROPOSAL_HEADER}\n{question.strip()}\n"
            f"{SOLUTION_HEADER}\n{code.rstrip()}\n{REVIEW_HEADER}\n")


def guide_completion(scores: GuideScores) -> str:
    """The training target: every judgment that is set, one per line, then the end markers."""
    lines = "".join(f"{k}: {v}\n" for k, v in scores.as_dict().items() if v is not None)
    return f"{lines}{END_HEADER}\n{END_OF_TEXT}"


def parse_guide(output: str, require: tuple[str, ...] = SGS_KEYS) -> GuideScores | Rejection:
    """The judgments in a Guide completion; `Rejection("missing_<key>")` when a required one
    is absent. Never raises."""
    try:
        text = cut_at(output, STOP)
        if not text.strip():
            return Rejection("empty")
        found: dict[str, int] = {}
        for line in text.splitlines():
            m = _LINE.match(line.strip())
            if not m:
                continue
            key = _ALIASES.get(m.group(1).lower(), m.group(1).lower())
            if key in found:
                continue
            lo, hi = RANGES[key]
            found[key] = int(min(hi, max(lo, round(float(m.group(2))))))
        for key in require:
            if key not in found:
                return Rejection(f"missing_{key}")
        return GuideScores(**found)
    except Exception as e:  # a parser must never take the run down
        return Rejection("parser_error", f"{type(e).__name__}: {e}"[:200])
