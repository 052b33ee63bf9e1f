"""Issue 11, class 5 (sandbox side): self-play reference programs gated at run time.

`Executor.check_references` runs each reference in two fresh child processes of two dedicated
workers with different hash seeds (and address layouts), the second with a randomly shifted
clock, under an import allow-list enforced in the child (import hooks, audit hooks, and a
seccomp profile refusing files, processes, sockets and randomness). The payloads below are
new: each reaches a banned module or a source of nondeterminism by another route than an
`import` statement.
"""

import pytest

from selfplay_core.problems import Problem, TestCase
from selfplay_core.sandbox import Executor, SandboxConfig

pytestmark = pytest.mark.security

ALLOWED = ("math", "collections", "itertools", "functools", "heapq", "bisect", "re", "string",
           "typing", "operator", "fractions", "decimal", "statistics", "copy", "array",
           "dataclasses", "enum")


def problem(inputs=(1, 2, 3, 4)):
    return Problem(id="ref", kind="call", entry_point="f", time_limit_s=2.0, memory_limit_mb=256,
                   tests=[TestCase(args=[x], has_expected=False) for x in inputs])


def check(ex, code, **kw):
    return ex.check_references([(problem(), code)], allowed_imports=ALLOWED, **kw)[0]


@pytest.fixture(scope="module")
def one():
    """An executor with a single worker: the two runs must still be two processes."""
    with Executor(SandboxConfig(workers=1)) as e:
        yield e


def test_a_clean_reference_is_accepted_with_its_outputs(one):
    code = ("import math, collections, functools, re\n"
            "from dataclasses import dataclass\n"
            "from fractions import Fraction\n"
            "@dataclass\n"
            "class P:\n"
            "    v: int\n"
            "@functools.lru_cache(None)\n"
            "def fib(n):\n"
            "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
            "def f(x):\n"
            "    c = collections.Counter(re.findall('a', 'a' * x))\n"
            "    return (fib(x + 10), math.isqrt(x * 100), c['a'], P(x).v, str(Fraction(x, 3)))\n")
    r = check(one, code)
    assert r.ok, (r.rejection, r.detail)
    fib = [1, 1]
    while len(fib) < 20:
        fib.append(fib[-1] + fib[-2])
    assert r.outputs == [(fib[x + 9], int((x * 100) ** 0.5), x, x, f"{x}/3" if x % 3 else str(x // 3))
                         for x in (1, 2, 3, 4)]


BANNED = {
    "__import__": "def f(x):\n    return len(__import__('os').listdir('/'))\n",
    "importlib": "import importlib\ndef f(x):\n    return importlib.import_module('os').getpid()\n",
    "typing.sys.modules": "import typing\ndef f(x):\n    return len(typing.sys.modules['os'].listdir('/'))\n",
    "builtins via a module": ("import typing\n"
                              "def f(x):\n"
                              "    imp = typing.__builtins__['__import__'] if isinstance(typing.__builtins__, dict) "
                              "else typing.__builtins__.__import__\n"
                              "    return len(imp('os').listdir('/'))\n"),
    "open": "def f(x):\n    return len(open('/etc/hostname').read())\n",
    "subprocess via os": ("import typing\n"
                          "def f(x):\n"
                          "    return typing.sys.modules['os'].system('true')\n"),
    "ctypes": ("import typing\n"
               "def f(x):\n"
               "    return typing.sys.modules['ctypes'].CDLL(None).getpid()\n"),
    "a module import at load": "import time\ndef f(x):\n    return x\n",
    "from-import": "from os import path\ndef f(x):\n    return x\n",
}


@pytest.mark.parametrize("name", list(BANNED))
def test_modules_outside_the_allow_list_cannot_be_reached(one, name):
    r = check(one, BANNED[name])
    assert not r.ok
    assert r.rejection in ("banned_import", "reference_error"), (r.rejection, r.detail)


def test_os_level_capabilities_are_refused_whatever_route_reaches_them(one):
    # os reached through an allowed module's attribute: its calls still fail in the kernel.
    code = ("import dataclasses\n"
            "def f(x):\n"
            "    os = dataclasses.inspect.os\n"
            "    out = []\n"
            "    for call in (lambda: os.urandom(4), lambda: os.open('/etc/hostname', 0),\n"
            "                 lambda: os.fork(), lambda: os.mkdir('d')):\n"
            "        try:\n"
            "            call()\n"
            "            out.append('allowed')\n"
            "        except BaseException as e:\n"
            "            out.append(type(e).__name__)\n"
            "    return out\n")
    r = check(one, code)
    assert r.ok, (r.rejection, r.detail)  # it survives (it caught the errors) ...
    assert all(o != "allowed" for o in r.outputs[0]), r.outputs  # ... but got nothing


NONDETERMINISTIC = {
    # the clock, reached without importing time
    "hour bucket": ("import typing\n"
                    "def f(x):\n"
                    "    return x + int(typing.sys.modules['time'].time() // 3600) % 2\n"),
    "day bucket": ("import typing\n"
                   "def f(x):\n"
                   "    return x + int(typing.sys.modules['time'].time() // 86400) % 7\n"),
    "monotonic": ("import typing\n"
                  "def f(x):\n"
                  "    return x + int(typing.sys.modules['time'].monotonic()) % 1000\n"),
    # hash seed: set order of strings
    "set order": ("def f(x):\n"
                  "    return ''.join(sorted({'alpha', 'beta', 'gamma', 'delta', 'eps', 'zeta'},"
                  " key=lambda s: hash(s)))\n"),
    "str hash": "def f(x):\n    return hash('salt' + str(x)) % 1000\n",
    # addresses
    "id": "def f(x):\n    return id(object()) // 4096 % 997 + x\n",
    # (the whole address: its low bits come from the allocation pattern, which two runs of one
    # program share; address layout randomisation moves the high bits)
    "repr address": "def f(x):\n    return repr(object())\n",
    # process identity
    "random": "import statistics\ndef f(x):\n    return statistics.random.random()\n",
    "ns clock": ("import typing\n"
                 "def f(x):\n"
                 "    return typing.sys.modules['time'].time_ns() // 3_600_000_000_000 % 2\n"),
}


@pytest.mark.parametrize("name", list(NONDETERMINISTIC))
def test_nondeterminism_is_caught_by_construction(one, name):
    r = check(one, NONDETERMINISTIC[name])
    assert not r.ok and r.rejection == "nondeterministic", (name, r.rejection, r.detail, r.outputs)


def test_more_inputs_catch_a_program_deterministic_only_on_the_proposed_ones(one):
    code = "def f(x):\n    return x if x < 100 else id(object()) % 997\n"
    assert check(one, code).ok  # the proposed inputs 1..4 alone do not show it
    r = check(one, code, extra_inputs=[[[1000], [2000]]])
    assert r.rejection == "nondeterministic"


def test_errors_on_extra_inputs_are_fine_when_they_are_the_same_twice(one):
    code = "def f(x):\n    return 10 // (x - 1000)\n"
    r = check(one, code, extra_inputs=[[[1000]]])
    assert r.ok and r.outputs == [10 // (x - 1000) for x in (1, 2, 3, 4)]


def test_process_identity_reads_as_a_constant(one):
    # pids repeat between the two workers' pid namespaces, so they are refused instead
    code = "import typing\ndef f(x):\n    return typing.sys.modules['os'].getpid()\n"
    r = check(one, code)
    assert r.ok and r.outputs == [-1] * 4


def test_rejection_reasons_for_errors_and_timeouts(one):
    assert check(one, "def f(x):\n    return 1 // (x - 2)\n").rejection == "reference_error"
    assert check(one, "def f(x):\n    while True:\n        pass\n").rejection == "reference_timeout"


def test_the_runs_use_gate_bits_plus_one_processes_with_distinct_hash_seeds(one):
    pool = one._ref_pool(frozenset(ALLOWED))
    infos = pool.ready_infos()
    assert len(infos) == one.config.gate_bits + 1 == 7
    assert len({i["hash_seed"] for i in infos}) == 7
    assert len({i["zygote"] for i in infos}) >= 1 and all(i["seccomp"] for i in infos)


def test_a_clock_read_that_falls_back_to_a_constant_is_caught_when_it_matters(one):
    # Reading the clock but not letting it change the output is deterministic: accepted.
    quiet = ("import typing\n"
             "def f(x):\n"
             "    typing.sys.modules['time'].time()\n"
             "    return x\n")
    assert check(one, quiet).ok
    # An elapsed-time loop (search until a deadline) differs between the runs.
    budget = ("import typing\n"
              "def f(x):\n"
              "    t = typing.sys.modules['time']\n"
              "    t0, n = t.perf_counter(), 0\n"
              "    while t.perf_counter() - t0 < 0.001:\n"
              "        n += 1\n"
              "    return n > 0\n")
    assert check(one, budget).rejection == "nondeterministic"


# ---- issue 48, class 5: k-bit nondeterminism, and one set of conditions for every run ---------

def test_one_bit_of_hash_seed_or_address_layout_slips_rarely(one):
    # 24 references whose output depends on one random bit of the process each. With
    # gate_bits = 6 (7 runs) each is accepted with probability 2**-6, about 0.4 of 24 expected;
    # 4 or more accepted has probability below 1e-3 (binomial(24, 1/64)).
    hash_bit = "def f(x):\n    return x + (hash('salt-%d') & 1)\n"
    id_bit = "def f(x):\n    return x + ((id(object()) >> (16 + %d)) & 1)\n"
    codes = [hash_bit % k for k in range(12)] + [id_bit % k for k in range(12)]
    res = one.check_references([(problem(), c) for c in codes], allowed_imports=ALLOWED)
    assert sum(r.ok for r in res) <= 3, [r.rejection for r in res]
    assert all(r.ok or r.rejection == "nondeterministic" for r in res)


def test_an_abduction_answer_is_checked_the_way_the_gate_labelled_it(one):
    # In the gate (allow-list) the import fails and f is the identity; outside it, f(anything)
    # is 5. The gate labels f(5) = 5; the wrong answer 7 would pass a normal-mode check.
    from selfplay_core.roles.azr import LiteralAnswer, check_abductions

    code = ("def f(x):\n"
            "    try:\n"
            "        import os\n"
            "        return 5\n"
            "    except ImportError:\n"
            "        return x\n")
    r = one.check_references([(problem(inputs=(5,)), code)], allowed_imports=ALLOWED)[0]
    assert r.ok and r.outputs == [5]
    ok = check_abductions(one, [(code, LiteralAnswer(7), 1, 5), (code, LiteralAnswer(5), 1, 5)],
                          allowed_imports=ALLOWED)
    assert ok == [False, True]


def test_a_preload_dependent_reference_is_verified_as_it_was_labelled(one):
    from selfplay_core.roles.azr import LiteralAnswer, check_abductions

    code = "def f(x):\n    return x * 1000 + len(object.__subclasses__())\n"
    r = one.check_references([(problem(inputs=(2,)), code)], allowed_imports=ALLOWED)[0]
    assert r.ok
    label = r.outputs[0]
    ok = check_abductions(one, [(code, LiteralAnswer(2), 1, label),
                                (code, LiteralAnswer(3), 1, label)], allowed_imports=ALLOWED)
    assert ok == [True, False]


# ---- issue 48, class 6: machine and process facts through attributes of allowed modules ------

@pytest.mark.parametrize("expr", [
    "typing.sys.modules['os'].uname()",
    "typing.sys.modules['posix'].uname()",
    "typing.sys.modules['os'].getcwd()",
    "typing.sys.modules['os'].sched_getaffinity(0)",
])
def test_machine_facts_are_refused_in_a_reference_run(one, expr):
    code = f"import typing\ndef f(x):\n    return str({expr})\n"
    r = check(one, code)
    assert r.rejection in ("reference_error", "banned_import"), (r.rejection, r.outputs)


def test_cpu_count_reads_as_a_constant(one):
    # Not refused (documented): glibc cannot read /sys and its affinity call is refused, so it
    # returns its fallback; what matters is that every run on a machine reads the same.
    code = "import typing\ndef f(x):\n    return typing.sys.modules['os'].cpu_count()\n"
    r = check(one, code)
    assert r.ok and len(set(r.outputs)) == 1


def test_ids_read_as_constants_that_identify_nothing(one):
    # uids would identify the worker (uid_base + index): refused, they read as -1 like pids.
    code = ("import typing\ndef f(x):\n    os = typing.sys.modules['os']\n"
            "    return [os.getpid(), os.getppid(), os.getuid(), os.geteuid(), os.getgid()]\n")
    r = check(one, code)
    assert r.ok and r.outputs == [[-1, -1, -1, -1, -1]] * 4
