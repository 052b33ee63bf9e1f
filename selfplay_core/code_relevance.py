"""How near a proposal's program is to the program it was written from, read from the code alone
(no world oracle, no model): the Dice similarity of their lines, 2 * LCS / (n + m), where LCS is
the longest common subsequence of normalised lines (stripped; blank and comment-only lines
dropped). 1.0 = the same lines in the same order; a one-line edit of an n-line program scores
2(n - 1) / (2n - 1) (a line removed or added) or (n - 1) / n (a line changed).

Why lines: an easier or harder variant of a program keeps most of its statements; a proposal that
drifts (changes constants, reorders, drops several steps) keeps fewer. GASP's code judge
(`method.judge: {name: code}`, methods/judges/code.py) scales the in-band teacher reward by it
and can gate the student batch.
"""

from __future__ import annotations

MAX_LINES = 400  # LCS is O(n m): longer programs are compared on their first MAX_LINES lines


def code_lines(code: str) -> list[str]:
    out = []
    for line in code.splitlines():
        s = line.strip()
        if s and not s.startswith("#"):
            out.append(s)
    return out[:MAX_LINES]


def lcs_length(a: list[str], b: list[str]) -> int:
    """Longest common subsequence of two line lists (one DP row at a time)."""
    if not a or not b:
        return 0
    prev = [0] * (len(b) + 1)
    for x in a:
        row = [0]
        for j, y in enumerate(b):
            row.append(prev[j] + 1 if x == y else max(prev[j + 1], row[j]))
        prev = row
    return prev[-1]


def line_similarity(source: str, proposal: str) -> float:
    """Dice similarity of the two programs' normalised lines, in [0, 1] (0 if either is empty)."""
    a, b = code_lines(source), code_lines(proposal)
    if not a or not b:
        return 0.0
    return 2.0 * lcs_length(a, b) / (len(a) + len(b))


def relevance_weight(similarity: float, power: float = 1.0) -> float:
    """The weight an in-band reward is scaled by, from `line_similarity`: similarity ** power, and
    0 at similarity 1.0, which is exactly a program with the source's lines (2 LCS = n + m only
    when both are the LCS): no edit is no variant, and a copied lemma would otherwise earn a
    lift its lemma's pass rate at full weight."""
    if power <= 0:
        raise ValueError(f"power must be > 0, got {power!r}")
    return 0.0 if similarity >= 1.0 else similarity ** power


EDIT_CLASSES = ("same_lines", "one_constant", "one_line_changed", "one_line_moved",
                "one_line_dropped", "one_line_added", "two_to_four_edits", "further")


def edit_class(reference: str, program: str) -> str:
    """How a program differs from a reference, in line edits (LCS): the same lines; one line
    changed only in its numbers (a constant slip); one line changed otherwise; one line moved
    (the same lines, one out of order); one dropped; one added; 2-4 lines dropped or added in
    all; more."""
    import re

    a, b = code_lines(reference), code_lines(program)
    common = lcs_length(a, b)
    missing, extra = len(a) - common, len(b) - common
    if missing == extra == 0:
        return "same_lines"
    if missing == extra == 1:
        gone = [x for x in a if x not in b]
        new = [x for x in b if x not in a]
        if not gone and not new:
            return "one_line_moved"
        digits = re.compile(r"\d+")
        if len(gone) == len(new) == 1 and digits.sub("#", gone[0]) == digits.sub("#", new[0]):
            return "one_constant"
        return "one_line_changed"
    if (missing, extra) == (1, 0):
        return "one_line_dropped"
    if (missing, extra) == (0, 1):
        return "one_line_added"
    return "two_to_four_edits" if missing + extra <= 4 else "further"
