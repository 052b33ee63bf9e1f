"""The executor: verifies untrusted code in isolated, warm worker processes.

Threat model
------------
The code we run is written by a policy under RL pressure: it is adversarial by default and
will exploit any way to turn a wrong answer into a reward. We defend the reward, the host, the
run's secrets and every other sample. The layers (each entry says what stops its class at the
root; docs/sandbox.md has the same list with the tests that attack each class):

1. Comparison (`compare.py`, also AZR's deduction answers). Expected outputs never enter the
   sandbox: children send plain values (tagged JSON, never pickle), the trusted parent decodes
   and compares them, so overridden `__eq__`, monkeypatched builtins, forged "PASS" prints or an
   early `exit(0)` cannot pass. The rules are exact: types checked at every depth (bool is not
   int, also in sets and dict keys, which compare by typed value); integers exact unless the
   task gives its own `atol`, which applies whatever the expected type (evalplus); a float
   expectation gets 1e-6 otherwise; `inf`/`nan` equal only themselves; stdout integer tokens
   exact, a plain ASCII number grammar. Only stdout is compared: stderr goes to a pipe of its
   own that the worker drains (its head is kept in `RunResult.stderr`), so it can neither
   fail nor pass a program.
2. Time. Every limit is enforced from outside the child: the worker opens a window per phase
   (module load and `Solution()` construction, then each test), measures it on the CPU time of
   the job's whole process tree (a cgroup v1 cpuacct cgroup per worker, in which the zygote
   forks every child, so setsid'd helpers and daemons count; where none
   can be made the launcher warns and the child's own CPU clock is used, descendants then
   bounded by the backstop only) plus a wall-clock backstop (2 x limit + 1 s of time the child
   did not spend waiting for a CPU), and SIGKILLs the job when it runs out. When a call-mode
   test reports, every other process of the job is killed. The child sets no timers; what
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
   perf, userfaultfd, io_uring and memfd, and kills foreign-ABI system calls. Children are
   forked by a zygote (pid 1 of the sandbox) that never held a job, and read their own job
   from a pipe: no queued job, earlier job or protocol state is in a child's memory. A job's
   files live in its own scratch directory on a size-capped tmpfs (`scratch_mb`), removed
   after it by flattening (each directory renamed into a fresh one of the worker's, fd-relative,
   nothing recursive, no error escapes); what cannot be removed replaces the worker after that
   job (its verdict stays its own) and the jobs sent behind it go to the replacement; nothing
   else is writable. Its processes are killed by one kill(-1) in the worker's pid
   namespace, which a forking process cannot outrun, and reaped before its verdict is sent.
   Memory: RLIMIT_AS per process, the scratch cap, and, where the machine allows one, a memory
   cgroup per worker limited to the running job's limit + scratch + the worker's share, which
   bounds every route (forked processes included); without a cgroup the bound is the process
   limit (16) times the address-space limit. uids come from a block of 512 held by a lock file.
5. Self-play gates (`Executor.check_references`). A reference runs in `gate_bits + 1` fresh
   children of as many dedicated workers with distinct hash seeds and address layouts, the
   second with a broken clock (NaN or an error on every read), on the proposed inputs plus any
   extra probes; all under an import allow-list enforced in the child (the program's
   `__import__`, audit hooks on imports, files, processes, sockets, ctypes) and a seccomp
   profile that also refuses files, processes, sockets, randomness, process and machine facts
   (pids and uids read as -1; uname, getcwd, CPU placement raise). Any difference is
   `nondeterministic`: one random bit slips with probability 2**-gate_bits. Later runs of an
   accepted reference (abduction checks: `Executor.verify_references`) happen in the same
   conditions. The loop's rounds validate through it (`stages.check_references`), each
   rejection counted.
6. Training tasks whose tests the student has seen (`datasets/livecodebench.every_test_shown`):
   a problem whose every test is a sample block of its statement is never an RL training task.
7. Harness errors: retried (`harness_retries`), counted (`Executor.stats`), reported as
   `harness_error` and never scored; callers exclude them from pass rates (the loop's one
   solve path, `solve.SolveResult.excluded`: no pass rate, reward or rollout rests on one, and
   a run fails past `sandbox.max_harness_error_share`; `selfplay evaluate` warns about every
   excluded one and fails past the same share).
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
missing and `require_isolation` refuses to run); without cgroup v1 cpuacct, CPU of a job's
descendants is bounded only by the wall backstop (the launcher warns); in the docker backend
children share the worker's uid and can kill it (that job becomes a harness error, retried then
excluded); module objects reachable through an allowed module's attributes in a reference run
(`typing.sys`) can be named, and what identifies the machine or process is refused by the kernel
except `os.cpu_count()` (glibc's fallback, one value per machine) and the clock (broken in one
run; a reference that falls back to a constant when it errs can match the real-clock runs by
chance). Without bubblewrap the local backend can still
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
