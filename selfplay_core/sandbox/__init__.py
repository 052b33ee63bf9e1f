"""The executor: verifies untrusted code in isolated, warm worker processes.

Threat model
------------
The code we run is written by a policy under RL pressure: it is adversarial by default and
will exploit any way to turn a wrong answer into a reward. We defend the reward, the host, the
run's secrets and every other sample. The layers (issue 11 names eight classes of weakness;
each entry says what stops the class, at its root):

1. Comparison (`compare.py`, also AZR's deduction answers). Expected outputs never enter the
   sandbox: children send plain values (tagged JSON, never pickle), the trusted parent decodes
   and compares them, so overridden `__eq__`, monkeypatched builtins, forged "PASS" prints or an
   early `exit(0)` cannot pass. The rules are exact: types checked at every depth (bool is not
   int, also in sets and dict keys, which compare by typed value); integers exact; tolerance
   only where the expected value is a float; `inf`/`nan` equal only themselves; stdout integer
   tokens exact, a plain ASCII number grammar.
2. Time. Every limit is enforced from outside the child: the worker opens a window per phase
   (module load and `Solution()` construction, then each test), measures it on the child's
   kernel CPU clock plus a wall-clock backstop (2 x limit + 1 s of time the child did not spend
   waiting for a CPU), and SIGKILLs the child when it runs out. The child sets no timers; what
   it does with signals is irrelevant; bytes on its channel extend nothing; the parent checks
   reported CPU times against the limit again. CPU limits do not stretch with machine load.
3. The channel. A child writes one ASCII line per message in a strict grammar checked by the
   worker, which assigns test indices and times itself; a result value is decoded by
   `channel.decode_output` against a size-bounded schema (no decimal integer over 80 digits, no
   more than 2**20 containers, only known tags with well-typed payloads). Anything else is that
   sample's runtime error. A harness error can only come from trusted code: the worker, the
   parent, or a child's set-up before it writes its start line; the channel is never buffered
   beyond the output cap, and no record reaches another sample.
4. Shared state between jobs. A seccomp filter (built here, no libseccomp) installed in every
   worker before its first job refuses SysV IPC, POSIX message queues, keyrings, unshare/setns
   and clone with namespace flags (clone3 reads as ENOSYS), the ptrace class, mounts, bpf,
   perf, userfaultfd, io_uring and memfd, and kills foreign-ABI system calls. A job's files
   live in its own scratch directory on a size-capped tmpfs (`scratch_mb`), removed after it;
   nothing else is writable. Its processes are killed by one kill(-1) in the worker's pid
   namespace, which a forking process cannot outrun, and reaped before its verdict is sent.
   Memory: RLIMIT_AS per process, the scratch cap, and, where the machine allows one, a memory
   cgroup per worker limited to the running job's limit + scratch + the worker's share, which
   bounds every route (forked processes included); without a cgroup the bound is the process
   limit (16) times the address-space limit. uids come from a block of 512 held by a lock file.
5. Self-play gates (`Executor.check_references`). A reference runs in two fresh children of
   two dedicated workers with different hash seeds and address layouts, the second with a
   broken clock (NaN or an error on every read), on the proposed inputs plus any extra probes;
   both under an import allow-list enforced in the child (the program's `__import__`, audit
   hooks on imports, files, processes, sockets, ctypes) and a seccomp profile that also refuses
   files, processes, sockets, randomness and pids. Any difference is `nondeterministic`. The
   loop's rounds validate through it (`stages.check_references`), each rejection counted.
6. Training tasks whose tests the student has seen (`datasets/livecodebench.every_test_shown`):
   a problem whose every test is a sample block of its statement is never an RL training task.
7. Harness errors: retried (`harness_retries`), counted (`Executor.stats`), reported as
   `harness_error` and never scored; callers exclude them from pass rates (the loop's one
   solve path, `solve.SolveResult.excluded`: no pass rate, reward or rollout rests on one, and
   a run fails past `sandbox.max_harness_error_share`; the evaluation runner likewise).
8. Limits under load (`datasets/limits.py`): one rule, max(1 s, 4 x the canonical solution's
   slowest test) in CPU seconds; expected-output caches hold only complete rows, and a canonical
   run that fails is retried, then an error.

Isolation around all of this (bubblewrap backend, the default where it works): private
network, pid, IPC and UTS namespaces (no route to the host's loopback), a minimal read-only view
of the file system (system dirs and the interpreter; not the project, datasets, home directories
or run outputs), each child under its own unprivileged uid (root: RLIMIT_NPROC then stops fork
bombs), rlimits on address space, CPU, file size (caps stdout), open files, processes, no core
dumps, and an empty environment (no variable of the parent: tokens, credentials, proxies).

Not defended: kernel exploits and side channels (use the docker backend on a dedicated host, or
gVisor, for hostile multi-tenant settings); seccomp is x86-64 only (elsewhere it is reported
missing and `require_isolation` refuses to run); module objects reachable through an allowed
module's attributes in a reference run (`typing.sys`) can be named, but what they could do is
refused by the kernel, and a reference that reads the clock yet falls back to a constant on
error can match the real-clock run by chance. Without bubblewrap the local backend can still
limit resources and switch uid but cannot hide the network or files; it warns loudly, and
`require_isolation: true` refuses to run.
"""

from selfplay_core.problems import Problem, Sample, SampleVerdict, TestCase, TestResult, Verdict
from selfplay_core.sandbox.backends import SandboxUnavailable
from selfplay_core.sandbox.config import SandboxConfig
from selfplay_core.sandbox.executor import Executor, ReferenceCheck, RunResult

__all__ = [
    "Executor", "ReferenceCheck", "RunResult", "SandboxConfig", "SandboxUnavailable", "Problem",
    "Sample", "SampleVerdict", "TestCase", "TestResult", "Verdict",
]
