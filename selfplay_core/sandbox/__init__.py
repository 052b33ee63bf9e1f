"""The executor: verifies untrusted code in isolated, warm worker processes.

Threat model
------------
The code we run is written by a policy under RL pressure: it is adversarial by default and
will exploit any way to turn a wrong answer into a reward. We defend the reward, the host and
the run's secrets:

* Expected outputs never enter the sandbox. Children receive code and inputs only and send back
  plain values (tagged JSON, never pickle); the trusted parent decodes them into plain Python
  values and compares them itself (`compare.py`). Overridden `__eq__`, monkeypatched builtins,
  forged "PASS" prints, an early `exit(0)` or a missing result can therefore never pass: a test
  passes only if a record for exactly that test carries a value equal to the expected one.
* Isolation (bubblewrap backend, the default where it works): private network namespace (no
  route to the host's loopback or anywhere else), private pid namespace (the parent and other
  host processes are invisible and unkillable), a minimal read-only view of the file system
  (system dirs and the interpreter; not the project, datasets, home directories or run
  outputs), a private /tmp, and a fresh scratch directory per job as the only writable place.
* Privilege: each child drops to its own unprivileged uid (uid_base + worker index) when the
  worker may switch uid (root, as in CI and containers), so RLIMIT_NPROC stops fork bombs and
  the child cannot signal, trace or read the worker.
* Limits per child: address space, CPU seconds, file size (which also caps stdout), open files,
  processes, no core dumps; per-test wall clock enforced by the worker outside the child
  (SIGKILL of the process group, then a sweep of every leftover process, then reaping); a
  whole-sample deadline; a cap on result size. No `signal.alarm` in the parent.
* Environment: workers start from an empty environment; no variable of the parent (tokens,
  credentials, proxies) exists inside.

Not defended: kernel exploits and side channels (use the docker backend on a dedicated host, or
gVisor, for hostile multi-tenant settings); CPU contention between workers affecting timings.
Without bubblewrap the local backend can still limit resources and switch uid but cannot hide
the network or files; it warns loudly, and `require_isolation: true` refuses to run.
"""

from selfplay_core.problems import Problem, Sample, SampleVerdict, TestCase, TestResult, Verdict
from selfplay_core.sandbox.backends import SandboxUnavailable
from selfplay_core.sandbox.config import SandboxConfig
from selfplay_core.sandbox.executor import Executor, RunResult

__all__ = [
    "Executor", "RunResult", "SandboxConfig", "SandboxUnavailable", "Problem", "Sample",
    "SampleVerdict", "TestCase", "TestResult", "Verdict",
]
