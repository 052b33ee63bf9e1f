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


# A Guide prompt for real code problems (e.g. a 7B coder model judging LiveCodeBench-style
# proposals against the goalpost they were written for): relevance to the goalpost, a clean
# statement, no redundant conditions. The answer format is the one `parse_guide` reads.
CODE_GUIDE_PROMPT = """You review practice problems written to help a programmer towards a hard target problem.

Target problem:
{target}

Proposed practice problem:
{question}

Its reference solution:
```python
{code}
```

Judge the proposed problem on three scales:
- relevance (0-5): how much of the target's key idea the practice problem exercises (0 = unrelated, 5 = the core difficulty of the target, in smaller form);
- redundancy (0 or 1): 1 if the statement has conditions, inputs or steps that change nothing about the answer;
- complexity (0-4): how convoluted the statement is (0 = clean and natural, 4 = an artificial pile of unrelated requirements).

Answer with exactly three lines and nothing else:
relevance: <0-5>
redundancy: <0-1>
complexity: <0-4>
"""

PROMPTS = {"code": CODE_GUIDE_PROMPT}


def load_prompt_template(name: str) -> str | None:
    """The Guide prompt template a config names: "toy" (None: the plain layout of
    `guide_prompt`), "code" (CODE_GUIDE_PROMPT), or a file whose text has the fields {target},
    {question} and {code}. ValueError naming what is wrong."""
    if name == "toy":
        return None
    if name in PROMPTS:
        return PROMPTS[name]
    from pathlib import Path

    path = Path(name)
    if not path.is_file():
        raise ValueError(f"Guide prompt {name!r}: not 'toy', 'code' or a readable file")
    text = path.read_text()
    missing = [f for f in ("{target}", "{question}", "{code}") if f not in text]
    if missing:
        raise ValueError(f"Guide prompt file {name}: the fields {', '.join(missing)} are missing")
    return text


def render_guide_prompt(template: str | None, target: str, question: str, code: str) -> str:
    """A Guide prompt from a template (`load_prompt_template`); None: `guide_prompt`'s layout."""
    if template is None:
        return guide_prompt(target, question, code)
    return (template.replace("{target}", target.strip()).replace("{question}", question.strip())
            .replace("{code}", code.rstrip()))
