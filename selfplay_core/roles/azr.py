"""AZR's roles: triplets (program p, input i, output o) and the three ways to ask about them.

* deduction: the student sees p and i and predicts o (a Python literal);
* abduction: the student sees p and o and gives an input i' with p(i') == o (checked by running
  p on i' in the sandbox, since several inputs may give the same output);
* induction: the student sees a description and examples and writes p (the teacher/student
  prompts of `roles.teacher` / `roles.student`; nothing here).

The deduction/abduction proposer sees K reference triplets from the buffer of its task type and
proposes a new program and one input; the executor runs the program to get the output (the
proposer never writes outputs). Prompts (plain text, as for the other roles):

    ### Reference                      ### Program
    ### Program                        def f(x):
    def f(x):                              ...
        return x                       ### Input
    ### Input                          [1, 2, 3]
    [1, 2, 3]                          ### Output
    ### Output                         <- the deduction student writes the literal here
    [1, 2, 3]
    ### Propose: deduction              (abduction: Program, Output, then "### Input")
    <- the proposer writes "### Program ... ### Input ... ### End"

An input is one literal: the argument for a one-parameter function, a k-tuple of the arguments
for k parameters (the teacher's convention).

Parsers never raise and never evaluate code. Values are read by a small AST walker that admits
literals only (numbers, strings, bytes, True/False/None, lists, tuples, sets, dicts, `set()`),
with caps on characters, nodes and nesting; anything else — a name, a call such as
`__import__('os')`, an attribute, a comprehension — is `not_a_literal`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from selfplay_core.problems import Problem, Sample, TestCase
from selfplay_core.roles.common import END_OF_TEXT, Rejection, check_function, split_sections, strip_fences
from selfplay_core.sandbox.compare import call_matches, values_match

TASK_TYPES = ("deduction", "abduction", "induction")

PROGRAM_HEADER = "### Program"
INPUT_HEADER = "### Input"
OUTPUT_HEADER = "### Output"
REFERENCE_HEADER = "### Reference"
PROPOSE_HEADER = "### Propose:"
END_HEADER = "### End"
STOP = (END_OF_TEXT, END_HEADER)            # proposer
ANSWER_STOP = (END_OF_TEXT, "\n### ")       # deduction / abduction student

# Literal-answer rejections.
NO_ANSWER = "no_answer"
NOT_A_LITERAL = "not_a_literal"
TOO_LARGE = "too_large"
PARSER_ERROR = "parser_error"
ANSWER_REASONS = (NO_ANSWER, NOT_A_LITERAL, TOO_LARGE, PARSER_ERROR)
# Proposal rejections (besides check_function's syntax_error / no_entry_point / bad_signature
# and input_<answer reason>).
PROPOSAL_REASONS = ("empty", "missing_program", "missing_input", "syntax_error", "no_entry_point",
                    "bad_signature", "input_no_answer", "input_not_a_literal", "input_too_large",
                    "input_arity", PARSER_ERROR)

MAX_LITERAL_CHARS = 2000   # a literal longer than this is a flood, not an answer
MAX_NODES = 2000
MAX_DEPTH = 24
MAX_LINES = 64             # lines of an answer that are looked at

IDENTITY_PROGRAM = "def f(x):\n    return x\n"

_INSTRUCTIONS = {
    "deduction": "Predict f's output on the input; answer with a Python literal.",
    "abduction": "Give an input on which f returns the output; answer with a Python literal.",
}
_PROPOSE_INSTRUCTIONS = {
    "deduction": "Write a new function f and one input for it, so that predicting the output "
                 "is neither trivial nor impossible.",
    "abduction": "Write a new function f and one input for it, so that finding an input "
                 "from the output is neither trivial nor impossible.",
}


# ---- values ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LiteralAnswer:
    value: Any

    def __bool__(self) -> bool:
        return True


class _NotLiteral(Exception):
    pass


class _TooLarge(Exception):
    pass


_CONST_TYPES = (int, float, complex, str, bytes, bool, type(None))


def _number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float, complex)


def _build(node: ast.AST, depth: int, budget: list[int], max_depth: int) -> Any:
    budget[0] -= 1
    if budget[0] < 0 or depth > max_depth:
        raise _TooLarge
    if isinstance(node, ast.Constant):
        if type(node.value) not in _CONST_TYPES:   # Ellipsis
            raise _NotLiteral
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and _number(node.operand):
        v = node.operand.value
        return -v if isinstance(node.op, ast.USub) else +v
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        # Complex literals only (1+2j, -1-2j), as ast.literal_eval allows.
        left = _build(node.left, depth + 1, budget, max_depth)
        right = node.right
        if (type(left) in (int, float) and isinstance(right, ast.Constant)
                and type(right.value) is complex):
            return left + right.value if isinstance(node.op, ast.Add) else left - right.value
        raise _NotLiteral
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_build(e, depth + 1, budget, max_depth) for e in node.elts]
        if isinstance(node, ast.List):
            return items
        if isinstance(node, ast.Tuple):
            return tuple(items)
        try:
            return set(items)
        except TypeError:
            raise _NotLiteral from None       # unhashable element
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):  # {**x}
            raise _NotLiteral
        out = {}
        for k, v in zip(node.keys, node.values):
            key = _build(k, depth + 1, budget, max_depth)
            try:
                out[key] = _build(v, depth + 1, budget, max_depth)
            except TypeError:
                raise _NotLiteral from None
        return out
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "set"
            and not node.args and not node.keywords):
        return set()
    raise _NotLiteral


def _bracket_depth(s: str) -> int:
    depth = best = 0
    for ch in s:
        if ch in "([{":
            depth += 1
            best = max(best, depth)
        elif ch in ")]}":
            depth -= 1
    return best


def parse_literal(text: str, *, max_chars: int = MAX_LITERAL_CHARS, max_nodes: int = MAX_NODES,
                  max_depth: int = MAX_DEPTH) -> LiteralAnswer | Rejection:
    """One Python literal, read without evaluating anything."""
    try:
        s = text.strip()
        if not s:
            return Rejection(NO_ANSWER)
        if len(s) > max_chars:
            return Rejection(TOO_LARGE, f"{len(s)} characters > {max_chars}")
        try:
            tree = ast.parse(s, mode="eval")
        except (SyntaxError, ValueError, OverflowError):
            if _bracket_depth(s) > max_depth:  # the parser's own nesting limit
                return Rejection(TOO_LARGE, f"nested deeper than {max_depth}")
            return Rejection(NOT_A_LITERAL, "does not parse")
        try:
            return LiteralAnswer(_build(tree.body, 0, [max_nodes], max_depth))
        except _TooLarge:
            return Rejection(TOO_LARGE, f"more than {max_nodes} nodes or deeper than {max_depth}")
        except _NotLiteral:
            return Rejection(NOT_A_LITERAL, type(tree.body).__name__)
    except (RecursionError, MemoryError):
        return Rejection(TOO_LARGE, "too deeply nested")
    except Exception as e:  # never take the run down
        return Rejection(PARSER_ERROR, f"{type(e).__name__}: {e}"[:200])


def is_literal_value(value: Any, max_chars: int = MAX_LITERAL_CHARS) -> Rejection | None:
    """None when `repr(value)` reads back (by `parse_literal`) as an equal value of the same
    type, i.e. a student could write it; else why not."""
    try:
        text = repr(value)
    except Exception as e:
        return Rejection(NOT_A_LITERAL, f"repr failed: {type(e).__name__}")
    back = parse_literal(text, max_chars=max_chars)
    if isinstance(back, Rejection):
        return back
    try:
        same = values_match(back.value, value, 0.0, 0.0) and type(back.value) is type(value)
    except Exception:
        same = False
    return None if same else Rejection(NOT_A_LITERAL, "repr does not read back")


def show_input(args: list) -> str:
    """The literal shown for an input: the argument itself, or the tuple of the arguments."""
    return repr(args[0]) if len(args) == 1 else repr(tuple(args))


def args_from_value(value: Any, n_params: int) -> list | None:
    if n_params == 1:
        return [value]
    if isinstance(value, tuple) and len(value) == n_params:
        return list(value)
    return None


# ---- answers -----------------------------------------------------------------------------------

# "The output is", "Answer:", "output =", ">>>", "-" bullets, "Input: x =" ...
_PREFIX = re.compile(
    r"^(?:>>>\s*|[-*]\s+)?(?:(?:so\s*,?\s*)?(?:the\s+)?(?:final\s+|predicted\s+|correct\s+)?"
    r"(?:output|answer|result|input|return\s+value|value)\s*(?:is|would\s+be|will\s+be|=|:)\s*"
    r"(?:[A-Za-z_]\w*\s*=(?!=)\s*)?|[A-Za-z_]\w*\s*=(?!=)\s*)",
    re.I)
_TRAILING_OK = re.compile(r"^(?:\s|[.,;:!?](?:\s|$))")
_CLOSERS = set(")]}'\"0123456789eEjJ")


def _call_args(call: ast.Call) -> ast.AST | None:
    """The literal node for an input written as a call `f(a)` or `f(a, b)`."""
    if call.keywords or any(isinstance(a, ast.Starred) for a in call.args) or not call.args:
        return None
    if len(call.args) == 1:
        return call.args[0]
    return ast.Tuple(elts=list(call.args), ctx=ast.Load())


def _from_expression(s: str, want: str) -> LiteralAnswer | Rejection | None:
    """`f(i) == o` / `assert f(i) == o` / `f(i)` (input only): the wanted side, if `s` has
    that shape; None otherwise."""
    s = s.strip()
    if s.startswith("assert "):
        s = s[len("assert "):]
    if len(s) > 2 * MAX_LITERAL_CHARS or "f(" not in s:
        return None
    try:
        tree = ast.parse(s, mode="eval").body
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        return None
    call, rhs = None, None
    if (isinstance(tree, ast.Compare) and len(tree.ops) == 1 and isinstance(tree.ops[0], ast.Eq)
            and isinstance(tree.left, ast.Call)):
        call, rhs = tree.left, tree.comparators[0]
    elif isinstance(tree, ast.Call) and want == "input":
        call = tree
    if call is None or not (isinstance(call.func, ast.Name) and call.func.id == "f"):
        return None
    node = _call_args(call) if want == "input" else rhs
    if node is None:
        return None
    try:
        return LiteralAnswer(_build(node, 0, [MAX_NODES], MAX_DEPTH))
    except _TooLarge:
        return Rejection(TOO_LARGE)
    except (_NotLiteral, RecursionError, MemoryError):
        return Rejection(NOT_A_LITERAL)


def _is_expression(s: str) -> bool:
    try:
        ast.parse(s, mode="eval")
        return True
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        return False


def _candidates(line: str) -> list[str]:
    """The line, the line without a known prefix, and either cut before trailing prose.
    Text that parses as a Python expression is code, not prose, and is never cut: `1 if
    g() else 2` or `[1] + h()` must not pass as `1` or `[1]`."""
    heads = [line]
    m = _PREFIX.match(line)
    if m and m.end() > 0:
        heads.append(line[m.end():])
    out = []
    for s in heads:
        out.append(s)
        if len(s) > 2 * MAX_LITERAL_CHARS or _is_expression(s):
            continue
        ends = [k + 1 for k in range(len(s) - 1, 0, -1)
                if s[k] in _CLOSERS and _TRAILING_OK.match(s[k + 1:])]
        out.extend(s[:e] for e in ends[:16])
    return out


def parse_answer(text: str, want: str = "output", *,
                 max_chars: int = MAX_LITERAL_CHARS) -> LiteralAnswer | Rejection:
    """A deduction (want="output") or abduction (want="input") answer: the first literal in the
    completion. Tolerates a restated header, code fences, `output = ...`, `The answer is ...`,
    `assert f(i) == o`, trailing prose and a run-on into the next section."""
    try:
        cut = text.split(END_OF_TEXT, 1)[0]
        k = cut.find("\n### ")
        head = cut[:k] if k != -1 else cut
        lines = head.splitlines()
        while lines and lines[0].strip().startswith("### "):   # a restated "### Output" header
            lines.pop(0)
        head = "\n".join(lines)
        if "```" in head:
            head = strip_fences(head)
        lines = [ln.strip() for ln in head.splitlines() if ln.strip()][:MAX_LINES]
        if not lines:
            return Rejection(NO_ANSWER)
        whole = head.strip()
        first = None
        attempts = [whole] if "\n" in whole else []
        for line in attempts + lines:
            shaped = _from_expression(line, want)
            if isinstance(shaped, LiteralAnswer):
                return shaped
            for cand in (_candidates(line) if shaped is None else []):
                r = parse_literal(cand, max_chars=max_chars)
                if isinstance(r, LiteralAnswer):
                    return r
                if first is None or (r.reason == TOO_LARGE and first.reason != TOO_LARGE):
                    first = r
            if isinstance(shaped, Rejection) and first is None:
                first = shaped
        return first if first is not None else Rejection(NOT_A_LITERAL)
    except Exception as e:
        return Rejection(PARSER_ERROR, f"{type(e).__name__}: {e}"[:200])


def answer_completion(value: Any) -> str:
    """The training target for a deduction/abduction student prompt."""
    return repr(value) + "\n" + END_OF_TEXT


# ---- proposals ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Triplet:
    program: str
    args: list          # the input, as an argument list
    output: Any

    @classmethod
    def identity(cls, value: Any) -> "Triplet":
        return cls(IDENTITY_PROGRAM, [value], value)


@dataclass(frozen=True)
class AZRProposal:
    code: str
    args: list
    n_params: int = 1
    question: str = ""       # an optional message; buffers and sample tables read `question`

    def __bool__(self) -> bool:
        return True


def _triplet_block(t: Triplet) -> str:
    return (f"{REFERENCE_HEADER}\n{PROGRAM_HEADER}\n{t.program.rstrip()}\n"
            f"{INPUT_HEADER}\n{show_input(t.args)}\n{OUTPUT_HEADER}\n{t.output!r}\n")


def proposer_prompt(task_type: str, references: list[Triplet]) -> str:
    if task_type not in ("deduction", "abduction"):
        raise ValueError(f"task_type must be deduction or abduction, got {task_type!r}")
    refs = "".join(_triplet_block(t) for t in references)
    return f"{refs}{PROPOSE_HEADER} {task_type}\n{_PROPOSE_INSTRUCTIONS[task_type]}\n"


def proposer_completion(code: str, args: list) -> str:
    """The training target: a proposal in exactly the format `parse_proposal` reads."""
    return (f"{PROGRAM_HEADER}\n{code.rstrip()}\n{INPUT_HEADER}\n{show_input(args)}\n"
            f"{END_HEADER}\n{END_OF_TEXT}")


def solver_prompt(task_type: str, program: str, args: list, output: Any) -> str:
    if task_type == "deduction":
        return (f"{_INSTRUCTIONS['deduction']}\n{PROGRAM_HEADER}\n{program.rstrip()}\n"
                f"{INPUT_HEADER}\n{show_input(args)}\n{OUTPUT_HEADER}\n")
    if task_type == "abduction":
        return (f"{_INSTRUCTIONS['abduction']}\n{PROGRAM_HEADER}\n{program.rstrip()}\n"
                f"{OUTPUT_HEADER}\n{output!r}\n{INPUT_HEADER}\n")
    raise ValueError(f"task_type must be deduction or abduction, got {task_type!r}")


_PROGRAM_NAMES = {"program", "solution", "code", "function"}
_INPUT_NAMES = {"input", "inputs", "arguments", "argument"}
_MESSAGE_NAMES = {"task", "message", "description"}


def _header_name(head: str) -> str | None:
    if not head.startswith("### "):
        return None
    return head[4:].strip().rstrip(":").split(":")[0].strip().lower()


def _sections(text: str) -> dict[str, str]:
    """name -> body for "### Name" headers (first occurrence wins; "### End" stops)."""
    return split_sections(text, _header_name, "end")


def _pick(sec: dict[str, str], names: set[str]) -> str | None:
    for name, body in sec.items():
        if name in names:
            return body
    return None


def parse_proposal(output: str, entry_point: str = "f", *,
                   max_chars: int = MAX_LITERAL_CHARS) -> AZRProposal | Rejection:
    """A deduction/abduction proposal: a program (### Program, or ### Solution, or a fenced
    block) and one input (### Input; the first literal line, or the whole section)."""
    try:
        text = output.split(END_OF_TEXT, 1)[0]
        if not text.strip():
            return Rejection("empty")
        sec = _sections(text)
        code = _pick(sec, _PROGRAM_NAMES)
        if code is None:
            m = re.search(r"```[a-zA-Z0-9_+-]*\n(.*?)(?:```|\Z)", text, re.S)
            if not m or f"def {entry_point}" not in m.group(1):
                return Rejection("missing_program")
            code = m.group(1)
        code = strip_fences(code).rstrip() + "\n"
        checked = check_function(code, entry_point)
        if isinstance(checked, Rejection):
            return checked
        n_params, code = checked
        if n_params == 0:
            return Rejection("bad_signature", f"{entry_point} takes no input")
        body = _pick(sec, _INPUT_NAMES)
        if body is None or not body.strip():
            return Rejection("missing_input")
        value = parse_answer(body, "input", max_chars=max_chars)
        if isinstance(value, Rejection):
            return Rejection(f"input_{value.reason}", value.detail)
        args = args_from_value(value.value, n_params)
        if args is None:
            return Rejection("input_arity", f"{entry_point} takes {n_params} parameters: "
                                            f"give a {n_params}-tuple")
        message = (_pick(sec, _MESSAGE_NAMES) or "").strip()
        return AZRProposal(code, args, n_params, message)
    except Exception as e:
        return Rejection(PARSER_ERROR, f"{type(e).__name__}: {e}"[:200])


# ---- verification ------------------------------------------------------------------------------

def check_deduction(answer: LiteralAnswer | Rejection, expected: Any, atol: float = 0.0) -> bool:
    """The predicted output equals the program's, by the executor's typed comparison."""
    if isinstance(answer, Rejection):
        return False
    return call_matches(answer.value, expected, atol=atol)


def check_abductions(executor, items: list[tuple[str, LiteralAnswer | Rejection, int, Any]],
                     time_limit_s: float = 1.0, memory_limit_mb: int = 256,
                     allowed_imports=None) -> list[bool | None]:
    """(program, answer, n_params, expected output) -> whether program(answer) == expected
    (None where the sandbox failed to say, after its retries).

    The program is model-written, so it runs in the sandbox; the comparison happens in the
    trusted parent on the decoded plain value (a returned object with a lying `__eq__` is an
    opaque marker there and equals nothing). With `allowed_imports` (the gate's allow-list)
    the program runs as the gate ran it when it labelled the task (`verify_references`: pure
    mode, on every reference worker), so a program that behaves differently outside the gate
    cannot make a wrong answer pass."""
    out = [False] * len(items)
    jobs = []
    for k, (program, answer, n_params, expected) in enumerate(items):
        if isinstance(answer, Rejection):
            continue
        args = args_from_value(answer.value, n_params)
        if args is None:
            continue
        prob = Problem(id=f"abduction/{k}", kind="call", entry_point="f",
                       tests=[TestCase(args=args, expected=expected)],
                       time_limit_s=time_limit_s, memory_limit_mb=memory_limit_mb)
        jobs.append((k, prob, Sample(prob.id, k, program)))
    if jobs:
        pairs = [(p, s) for _, p, s in jobs]
        verdicts = (executor.verify(pairs) if allowed_imports is None else
                    executor.verify_references(pairs, allowed_imports=allowed_imports))
        for (k, _, _), v in zip(jobs, verdicts):
            # None: a harness error (the sandbox's fault, after its retries): no verdict
            out[k] = None if v.verdict.value == "harness_error" else v.passed
    return out
