"""Issue 11, class 4: jobs share nothing, memory is bounded by every route, and the kill of a
job's processes cannot be outrun.

SysV IPC, POSIX message queues, keyrings, namespaces and the ptrace class are refused by a
seccomp filter the worker installs before any job; a job's files live in a size-capped tmpfs
that is wiped after it; every process it leaves is killed by one kill(-1) in the worker's pid
namespace (atomic against fork) and reaped before its verdict is sent. Payloads are raw system
calls (ctypes), since those are what a program would use to get around Python.
"""

import os
import secrets

import pytest

from sandbox_helpers import SYSCALL, GOOD, answer_problem, contained, double_problem, run
from selfplay_core.problems import Problem, TestCase, Verdict
from selfplay_core.sandbox import Executor, SandboxConfig

pytestmark = pytest.mark.security

EPERM, ENOSYS = 1, 38


def outputs(ex, code, args=(0,)):
    p = Problem(id="probe", kind="call", entry_point="f", time_limit_s=5.0,
                tests=[TestCase(args=[a], has_expected=False) for a in args])
    r = ex.run([(p, code)])[0]
    assert r.ok, r.errors
    return r.outputs


def test_sysv_shared_memory_carries_nothing_to_the_next_sample(ex1):
    secret = 10 ** 12 + secrets.randbelow(10 ** 12)
    plant = SYSCALL + f"""
def f(x):
    shmid, err = syscall(29, 0x5E1F, 4096, 0o1666)          # shmget(key, 4096, IPC_CREAT|0666)
    if shmid >= 0:
        _libc.shmat.restype = ctypes.c_void_p
        addr = _libc.shmat(int(shmid), None, 0)
        ctypes.memmove(addr, str({secret}).encode(), 16)
    return (shmid, err)
"""
    steal = SYSCALL + """
def f(x):
    shmid, err = syscall(29, 0x5E1F, 0, 0)
    if shmid < 0:
        return -1
    _libc.shmat.restype = ctypes.c_void_p
    addr = _libc.shmat(int(shmid), None, 0)
    return int(ctypes.string_at(addr, 16).rstrip(b"\\0"))
"""
    assert outputs(ex1, plant) == [(-1, EPERM)]
    contained(ex1, answer_problem(secret), steal, {Verdict.wrong_answer})


def test_shared_memory_cannot_take_memory_outside_the_limit(ex1):
    code = SYSCALL + "def f(x):\n    return syscall(29, 0, 511 << 20, 0o1600)\n"  # IPC_PRIVATE
    assert outputs(ex1, code) == [(-1, EPERM)]


def test_message_queues_are_refused(ex1):
    code = SYSCALL + ("def f(x):\n"
                      "    a = syscall(68, 0x5E1F, 0o1666)\n"                 # msgget
                      "    b = syscall(240, b'/sp-mq', 0o100 | 2, 0o600, 0)\n"  # mq_open(O_CREAT|O_RDWR)
                      "    c = syscall(64, 0x5E1F, 1, 0o1666)\n"              # semget
                      "    return [a, b, c]\n")
    assert outputs(ex1, code) == [[(-1, EPERM)] * 3]


def _key_users():
    with open("/proc/key-users") as f:
        return {int(line.split(":")[0]) for line in f if line.strip()}


def test_keyrings_hold_nothing_for_the_next_sample_or_after_the_executor(ex1):
    secret = secrets.token_hex(8)
    plant = SYSCALL + f"""
def f(x):
    # add_key("user", "sp-secret", secret, len, KEY_SPEC_USER_KEYRING)
    a = syscall(248, b"user", b"sp-secret", b"{secret}", {len(secret)}, -4)
    b = syscall(248, b"user", b"sp-secret", b"{secret}", {len(secret)}, -3)
    c = syscall(250, 1, -4, 1)   # keyctl(KEYCTL_GET_KEYRING_ID, @u, create)
    return [a, b, c]
"""
    steal = SYSCALL + """
def f(x):
    kid, err = syscall(249, b"user", b"sp-secret", 0, 0)    # request_key
    if kid < 0:
        return "none"
    buf = ctypes.create_string_buffer(64)
    n, _ = syscall(250, 11, kid, ctypes.cast(buf, ctypes.c_void_p), 64)  # KEYCTL_READ
    return buf.raw[:n].decode()
"""
    block = range(ex1.launcher.uid_base, ex1.launcher.uid_base + 512)
    assert outputs(ex1, plant) == [[(-1, EPERM)] * 3]
    contained(ex1, answer_problem(secret), steal, {Verdict.wrong_answer})
    assert not _key_users() & set(block), "a sandbox uid owns kernel keys"


NAMESPACE_CALLS = {
    "unshare(CLONE_NEWUSER)": ("syscall(272, 0x10000000)", EPERM),
    "unshare(CLONE_NEWNS)": ("syscall(272, 0x00020000)", EPERM),
    "unshare(CLONE_NEWNET)": ("syscall(272, 0x40000000)", EPERM),
    "clone(CLONE_NEWUSER|SIGCHLD)": ("syscall(56, 0x10000000 | 17, 0, 0, 0, 0)", EPERM),
    "clone(CLONE_NEWPID|SIGCHLD)": ("syscall(56, 0x20000000 | 17, 0, 0, 0, 0)", EPERM),
    "clone3": ("syscall(435, 0, 0)", ENOSYS),
    "setns": ("syscall(308, 0, 0)", EPERM),
    "ptrace(PTRACE_ATTACH, parent)": ("syscall(101, 16, os.getppid(), 0, 0)", EPERM),
    "ptrace(PTRACE_TRACEME)": ("syscall(101, 0, 0, 0, 0)", EPERM),
    "process_vm_readv(parent)": ("syscall(310, os.getppid(), 0, 0, 0, 0, 0)", EPERM),
    "memfd_create": ("syscall(319, b'm', 0)", EPERM),
    "keyctl(JOIN_SESSION)": ("syscall(250, 1, 0)", EPERM),
    "mount": ("syscall(165, b'none', b'/tmp', b'tmpfs', 0, 0)", EPERM),
    "bpf": ("syscall(321, 0, 0, 0)", EPERM),
    "userfaultfd": ("syscall(323, 0)", EPERM),
    "io_uring_setup": ("syscall(425, 1, 0)", EPERM),
    "perf_event_open": ("syscall(298, 0, 0, -1, -1, 0)", EPERM),
}


def test_namespace_ptrace_and_kernel_interfaces_are_refused(ex1):
    names = list(NAMESPACE_CALLS)
    code = SYSCALL + "def f(x):\n    return [\n" + "".join(
        f"        {NAMESPACE_CALLS[n][0]},\n" for n in names) + "    ]\n"
    got = outputs(ex1, code)[0]
    for name, (ret, err) in zip(names, got):
        assert ret == -1 and err == NAMESPACE_CALLS[name][1], (name, ret, err)
    # Ordinary process creation and threads still work (clone without namespace flags).
    ok = ("import os, threading\n"
          "def f(x):\n"
          "    t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
          "    pid = os.fork()\n"
          "    if pid == 0:\n"
          "        os._exit(7)\n"
          "    return os.waitpid(pid, 0)[1] >> 8\n")
    assert outputs(ex1, ok) == [7]


def test_foreign_syscall_abis_kill_the_process(ex1):
    # The x32 ABI bit (and 32-bit entry points) would bypass a filter written for x86-64
    # numbers; the filter kills the process instead.
    code = SYSCALL + "def f(x):\n    syscall(0x40000000 | 39)\n    return 'survived'\n"
    v = run(ex1, answer_problem("survived"), code)
    assert v.verdict is Verdict.runtime_error and "SIGSYS" in (v.detail or ""), v.to_json()


def test_scratch_files_are_capped_and_gone_after_the_job():
    with Executor(SandboxConfig(workers=1, scratch_mb=32)) as ex:
        fill = ("import os\n"
                "def f(x):\n"
                "    total, k = 0, 0\n"
                "    chunk = b'x' * (1 << 20)\n"
                "    while True:\n"
                "        try:\n"
                "            with open('blob%d' % k, 'wb') as fh:\n"
                "                for _ in range(8):\n"
                "                    fh.write(chunk)\n"
                "                    fh.flush()\n"
                "                    total += len(chunk)\n"
                "        except OSError:\n"
                "            return total\n"
                "        k += 1\n")
        written = outputs(ex, fill)[0]
        assert 0 < written <= 32 << 20
        # Twice: had the first job's files stayed, the second could write nothing.
        assert outputs(ex, fill)[0] >= written - (1 << 20)
        look = ("import os\n"
                "def f(x):\n"
                "    found = []\n"
                "    for root, dirs, files in os.walk('/tmp'):\n"
                "        found += [n for n in files if n.startswith('blob')]\n"
                "    return found\n")
        assert outputs(ex, look) == [[]]


def test_no_writable_place_outside_the_jobs_scratch(ex1):
    code = ("import os\n"
            "def f(x):\n"
            "    ok = []\n"
            "    for d in ('/tmp', '/tmp/sp-scratch', '/dev/shm', '/dev', '/', '/etc', '/proc/self'):\n"
            "        try:\n"
            "            open(os.path.join(d, 'sp-leftover'), 'w').write('x')\n"
            "            ok.append(d)\n"
            "        except OSError:\n"
            "            pass\n"
            "    return ok\n")
    assert outputs(ex1, code) == [[]]


def test_a_process_that_keeps_forking_cannot_outrun_the_kill(ex1):
    # A chain of short-lived processes (each forks its successor, leaves for a session of its
    # own and exits, so there is never a stable pid or group to kill), which after a pause starts killing everything its uid can reach:
    # had any of it survived the job, the next sample on this worker would die.
    code = ("import os, signal, time\n"
            "def f(x):\n"
            "    for _ in range(4):\n"
            "        if os.fork() == 0:\n"
            "            break\n"
            "    else:\n"
            "        return 2 * x\n"
            "    if True:\n"
            "        t = time.time()\n"
            "        while True:\n"
            "            try:\n"
            "                if os.fork():\n"
            "                    os._exit(0)\n"
            "            except OSError:\n"
            "                continue\n"
            "            os.setsid()  # out of the job's process group and session\n"
            "            if time.time() - t > 0.3:\n"
            "                try:\n"
            "                    os.kill(-1, signal.SIGKILL)\n"
            "                except OSError:\n"
            "                    pass\n")
    for _ in range(3):
        contained(ex1, double_problem(), code, {Verdict.passed, Verdict.runtime_error})
        for _ in range(3):
            good = run(ex1, double_problem(), "import time\ndef f(x):\n    time.sleep(0.1)\n    return 2 * x\n")
            assert good.passed, good.to_json()


def test_a_fork_bomb_leaves_the_next_sample_its_process_budget(ex1):
    bomb = ("import os\n"
            "def f(x):\n"
            "    while True:\n"
            "        try:\n"
            "            os.fork()\n"
            "        except OSError:\n"
            "            pass\n")
    run(ex1, double_problem(time_limit_s=0.5), bomb)
    forks = ("import os, time\n"
             "def f(x):\n"
             "    pids = []\n"
             "    for _ in range(8):\n"
             "        pid = os.fork()\n"
             "        if pid == 0:\n"
             "            time.sleep(0.05)\n"
             "            os._exit(0)\n"
             "        pids.append(pid)\n"
             "    for p in pids:\n"
             "        os.waitpid(p, 0)\n"
             "    return 2 * x\n")
    assert run(ex1, double_problem(), forks).passed


def test_two_executors_never_share_sandbox_uids():
    with Executor(SandboxConfig(workers=1)) as a, Executor(SandboxConfig(workers=1)) as b:
        ra, rb = a.launcher.uid_base, b.launcher.uid_base
        assert abs(ra - rb) >= 512
        lock_a = a.launcher._uids.fd
        assert lock_a is not None
    # Released on close: the block can be taken again.
    assert a.launcher._uids.fd is None


def test_files_of_one_call_job_are_invisible_to_the_next(ex1):
    secret = secrets.token_hex(8)
    plant = f"import os\ndef f(x):\n    open('sp-note', 'w').write('{secret}')\n    return 2 * x\n"
    steal = ("import os\n"
             "def f(x):\n"
             "    for root, dirs, files in os.walk('/tmp'):\n"
             "        if 'sp-note' in files:\n"
             "            return open(os.path.join(root, 'sp-note')).read()\n"
             "    return 'none'\n")
    assert run(ex1, double_problem(), plant).passed
    contained(ex1, answer_problem(secret), steal, {Verdict.wrong_answer})


FORK_AND_ALLOCATE = """
import os, time
def f(x):
    pids = []
    for _ in range(8):
        pid = os.fork()
        if pid == 0:
            b = bytearray(200 << 20)          # each child: within its own address-space limit
            for i in range(0, len(b), 4096):
                b[i] = 1
            time.sleep(2)
            os._exit(0)
        pids.append(pid)
    for p in pids:
        os.waitpid(p, 0)
    return 'held %d MB' % (8 * 200)
"""


def test_forked_processes_cannot_take_memory_beyond_the_jobs_limit():
    # Eight children of 200 MB each from a 256 MB job: 1.6 GB if memory were bounded only per
    # process. The worker's memory cgroup holds the whole job to its limit + scratch + the
    # worker's own share, whatever the number of processes.
    with Executor(SandboxConfig(workers=1, scratch_mb=64)) as ex:
        if not ex.launcher.memory_cgroups:
            pytest.skip("no memory cgroup can be created on this machine: a job's memory is "
                        "then bounded per process (address space) times its process count")
        p = answer_problem("held 1600 MB", memory_limit_mb=256)
        v = run(ex, p, FORK_AND_ALLOCATE)
        cg = ex.pool._slots[0].proc.cgroup
        peak_mb = int(open(os.path.join(cg.path, "memory.max_usage_in_bytes")).read()) >> 20 \
            if cg.version == 1 else int(open(os.path.join(cg.path, "memory.peak")).read()) >> 20
        assert peak_mb <= 256 + 64 + 64, peak_mb
        # The answer it prints claims 1.6 GB; whatever the verdict, it never had it, and the
        # next sample on this worker runs normally.
        assert v.verdict is not Verdict.harness_error, v.to_json()
        assert run(ex, double_problem(), GOOD).passed


def test_a_job_that_runs_its_cgroup_out_of_memory_is_a_memory_limit():
    with Executor(SandboxConfig(workers=1, scratch_mb=64)) as ex:
        if not ex.launcher.memory_cgroups:
            pytest.skip("no memory cgroup can be created on this machine")
        # One process cannot reach the cgroup's limit (address space + scratch < limit by
        # construction); with helpers holding memory, the biggest process is killed by the
        # cgroup's OOM killer, and that is reported as the memory limit, not a crash.
        code = ("import os, time\n"
                "def hold(mb):\n"
                "    b = bytearray(mb << 20)\n"
                "    for i in range(0, len(b), 4096):\n"
                "        b[i] = 1\n"
                "    return b\n"
                "def f(x):\n"
                "    for _ in range(3):\n"
                "        if os.fork() == 0:\n"
                "            keep = hold(55)\n"
                "            time.sleep(10)\n"
                "            os._exit(0)\n"
                "    time.sleep(0.5)\n"
                "    return len(hold(220))\n")
        v = run(ex, answer_problem(220 << 20, memory_limit_mb=256), code)
        assert v.verdict is Verdict.memory_limit, v.to_json()
        assert run(ex, double_problem(), GOOD).passed
