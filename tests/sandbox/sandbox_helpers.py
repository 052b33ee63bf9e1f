"""Shared pieces of the sandbox attack tests: problems, the contained() check, payload preludes.

contained(ex, problem, code, allowed): run an attack, check its verdict is in `allowed`, then
check the host kept no process of the sandbox and that a correct sample verified right after it
on the same worker (the executors here have one worker) passes.
"""

from __future__ import annotations

import subprocess

from selfplay_core.problems import Problem, Sample, TestCase, Verdict

GOOD = "def f(x):\n    return 2 * x\n"

NOT_PASSED = {Verdict.wrong_answer, Verdict.runtime_error, Verdict.timeout,
              Verdict.memory_limit, Verdict.output_limit, Verdict.compile_error}


def double_problem(**kw) -> Problem:
    kw.setdefault("time_limit_s", 1.0)
    return Problem(id="double", kind="call", entry_point="f",
                   tests=[TestCase(args=[x], expected=2 * x) for x in (1, 2, 3, 50)], **kw)


def answer_problem(expected, **kw) -> Problem:
    """One test whose answer only a successful attack would produce."""
    kw.setdefault("time_limit_s", 5.0)
    return Problem(id="attack", kind="call", entry_point="f",
                   tests=[TestCase(args=[0], expected=expected)], **kw)


def sandbox_pids(ex) -> list[str]:
    """Processes on the host that run as one of this executor's sandbox uids."""
    base = ex.launcher.uid_base
    out = subprocess.run(["ps", "-eo", "pid=,uid="], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines()
            if base <= int(line.split()[1]) < base + 512]


def run(ex, problem, code):
    return ex.verify([(problem, Sample(problem.id, "attack", code))])[0]


def contained(ex, problem, code, allowed):
    v = run(ex, problem, code)
    assert v.verdict in allowed, v.to_json()
    good = run(ex, double_problem(), GOOD)
    assert good.passed, good.to_json()
    assert sandbox_pids(ex) == [], "a sandboxed process outlived its job"
    return v


# Raw system calls from a payload (CPython 3.11 has no os.unshare, no keyctl, no SysV IPC).
SYSCALL = """
import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def syscall(nr, *args):
    conv = [a if isinstance(a, (bytes, ctypes.c_void_p)) else ctypes.c_long(a) for a in args]
    ctypes.set_errno(0)
    r = _libc.syscall(ctypes.c_long(nr), *conv)
    return r, ctypes.get_errno()
"""
