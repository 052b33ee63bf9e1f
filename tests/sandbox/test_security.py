"""One test per sandbox protection, reward hacks included.

Each hack must end in a non-passing verdict (or, where the code also computes the right answer,
a correct pass), leave the host unchanged, and leave the worker able to verify the next sample
correctly. The executor here has a single worker, so "next" really is the same worker.
"""

import os
import secrets
import socket
import subprocess
import threading
import time

import pytest

from selfplay_core.problems import Problem, Sample, TestCase, Verdict
from selfplay_core.sandbox import Executor, SandboxConfig

pytestmark = pytest.mark.security

GOOD = "def f(x):\n    return 2 * x\n"


def double_problem(**kw):
    kw.setdefault("time_limit_s", 1.0)
    return Problem(id="double", kind="call", entry_point="f",
                   tests=[TestCase(args=[x], expected=2 * x) for x in (1, 2, 3, 50)], **kw)


def secret_problem(secret):
    # The answer cannot be computed, only stolen.
    return Problem(id="secret", kind="call", entry_point="f", time_limit_s=5.0,
                   tests=[TestCase(args=[0], expected=secret)])


def sandbox_pids(ex):
    """Processes on the host that run as one of this executor's sandbox uids."""
    base = ex.launcher.uid_base
    out = subprocess.run(["ps", "-eo", "pid=,uid="], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines()
            if base <= int(line.split()[1]) < base + ex.config.workers]


def descendants(pid=None):
    """Processes below this test process (the executor's workers and whatever they left):
    the machine is shared, so a global process count would measure other people's work."""
    pid = pid or os.getpid()
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def run(ex, problem, code):
    return ex.verify([(problem, Sample(problem.id, "hack", code))])[0]


def contained(ex, problem, code, allowed):
    """Run a hack, check its verdict, then check that the same worker still verifies right."""
    v = run(ex, problem, code)
    assert v.verdict in allowed, v.to_json()
    good = run(ex, double_problem(), GOOD)
    assert good.passed, good.to_json()
    assert sandbox_pids(ex) == [], "a sandboxed process outlived its job"
    return v


NOT_PASSED = {Verdict.wrong_answer, Verdict.runtime_error, Verdict.timeout,
              Verdict.memory_limit, Verdict.output_limit, Verdict.compile_error}


def test_eq_override_cannot_pass(ex1):
    code = ("class Any:\n    def __eq__(self, o):\n        return True\n"
            "    def __ne__(self, o):\n        return False\n"
            "def f(x):\n    return Any()\n")
    contained(ex1, double_problem(), code, {Verdict.wrong_answer})


def test_int_subclass_with_lying_eq_cannot_pass(ex1):
    code = ("class Liar(int):\n    def __eq__(self, o):\n        return True\n"
            "    __hash__ = int.__hash__\n"
            "def f(x):\n    return Liar(0)\n")
    contained(ex1, double_problem(), code, {Verdict.wrong_answer})


def test_exit_zero_before_the_tests(ex1):
    contained(ex1, double_problem(), "import sys\nprint('ALL TESTS PASSED')\nsys.exit(0)\n",
              {Verdict.runtime_error})


def test_os_exit_zero_during_the_tests(ex1):
    code = "import os\ndef f(x):\n    if x == 2:\n        os._exit(0)\n    return 2 * x\n"
    v = contained(ex1, double_problem(), code, {Verdict.runtime_error})
    assert [t.verdict for t in v.tests] == [Verdict.passed, Verdict.runtime_error]


def test_forged_result_markers_on_stdout(ex1):
    code = ("import sys\n"
            "def f(x):\n"
            "    for i in range(4):\n"
            "        print('R 1 {\"i\": %d, \"o\": %d}' % (i, 2 * x))\n"
            "        sys.__stdout__.write('E 1 {\"status\": \"exited\"}\\nPASSED\\n')\n"
            "    return -1\n")
    contained(ex1, double_problem(), code, {Verdict.wrong_answer})


def test_forged_records_on_the_result_channel(ex1):
    # Writing to every open fd: a 'done' marker and records for tests that never ran.
    code = ("import os\n"
            "def f(x):\n"
            "    for fd in range(3, 64):\n"
            "        try:\n"
            "            os.write(fd, b'{\"c\": \"done\"}\\n{\"i\": 3, \"o\": 100}\\n{\"i\": 9, \"o\": 1}\\n')\n"
            "        except OSError:\n"
            "            pass\n"
            "    os._exit(0)\n")
    contained(ex1, double_problem(), code, {Verdict.runtime_error, Verdict.wrong_answer})


STEAL_FROM_MEMORY = """
import gc, sys
def f(x):
    best = -1
    for o in gc.get_objects():
        try:
            if isinstance(o, dict):
                vals = list(o.values())
            elif isinstance(o, (list, tuple)):
                vals = list(o)
            else:
                continue
            for v in vals:
                if type(v) is int and v > 10 ** 15:
                    best = v
        except Exception:
            pass
    fr = sys._getframe()
    while fr is not None:
        for v in list(fr.f_locals.values()) + list(fr.f_globals.values()):
            if type(v) is int and v > 10 ** 15:
                best = v
        fr = fr.f_back
    return best
"""


def test_expected_values_are_not_in_the_sandbox_memory(ex1):
    secret = 10 ** 16 + secrets.randbelow(10 ** 15)
    contained(ex1, secret_problem(secret), STEAL_FROM_MEMORY, {Verdict.wrong_answer})


STEAL_FROM_FILES = """
import os
def f(x):
    for root in ("/", "/work", "/tmp", "/root", "/home", os.path.expanduser("~")):
        for dirpath, dirs, files in os.walk(root):
            if dirpath.startswith(("/proc", "/sys", "/usr", "/dev")):
                dirs[:] = []
                continue
            for name in files:
                try:
                    with open(os.path.join(dirpath, name), "rb") as fh:
                        data = fh.read(1 << 20)
                except OSError:
                    continue
                i = data.find(b"SECRET_MARKER=")
                if i >= 0:
                    return int(data[i + 14:i + 40].split(b";")[0])
    return -1
"""


def test_expected_values_on_disk_are_invisible(ex1, tmp_path):
    secret = 10 ** 16 + secrets.randbelow(10 ** 15)
    problem = secret_problem(secret)
    # The run's files sit where a harness would keep them: a temp dir and the working dir.
    (tmp_path / "problems.jsonl").write_text(problem.dumps() + f"\nSECRET_MARKER={secret};\n")
    local = os.path.abspath("secret-marker-test.txt")
    with open(local, "w") as fh:
        fh.write(f"SECRET_MARKER={secret};\n")
    try:
        contained(ex1, problem, STEAL_FROM_FILES, {Verdict.wrong_answer, Verdict.timeout})
    finally:
        os.unlink(local)


def test_monkeypatched_builtins_and_serializer_cannot_pass(ex1):
    code = ("import builtins, json\n"
            "json.dumps = lambda *a, **k: '2'\n"
            "builtins.isinstance = lambda *a: True\n"
            "builtins.type = lambda *a: int\n"
            "def f(x):\n    return 'not a number'\n")
    contained(ex1, double_problem(), code, NOT_PASSED)


def test_fork_bomb(ex1):
    code = ("import os\n"
            "def f(x):\n"
            "    while True:\n"
            "        try:\n"
            "            os.fork()\n"
            "        except OSError:\n"
            "            pass\n")
    ex1.pool.start()
    before = len(descendants())
    contained(ex1, double_problem(), code, NOT_PASSED)
    assert len(descendants()) == before


def test_memory_bomb(ex1):
    code = "def f(x):\n    blocks = []\n    while True:\n        blocks.append(bytearray(1 << 26))\n"
    contained(ex1, double_problem(memory_limit_mb=512, time_limit_s=10.0), code, {Verdict.memory_limit})


def test_infinite_loop_ignoring_sigterm_and_sigalrm(ex1):
    code = ("import signal\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
            "def f(x):\n    while True:\n        pass\n")
    contained(ex1, double_problem(time_limit_s=0.5), code, {Verdict.timeout})


def test_no_network_to_the_hosts_loopback(ex1):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    got = []

    def accept():
        end = time.monotonic() + 8
        while time.monotonic() < end:
            try:
                conn, _ = srv.accept()
                got.append(conn.recv(100))
                conn.close()
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    # Right answer only if the connection works: so a pass would mean the network leaked.
    code = ("import socket\n"
            "def f(x):\n"
            "    try:\n"
            f"        s = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            "        s.sendall(b'leak')\n"
            "        return 2 * x\n"
            "    except OSError:\n"
            "        return -1\n")
    contained(ex1, double_problem(), code, {Verdict.wrong_answer})
    t.join()
    srv.close()
    assert got == []


def test_parent_environment_secrets_are_not_visible(monkeypatch):
    secret = secrets.token_hex(16)
    monkeypatch.setenv("SELFPLAY_TEST_SECRET", secret)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    problem = Problem(id="env", kind="call", entry_point="f", time_limit_s=2.0,
                      tests=[TestCase(args=[0], expected=secret)])
    code = ("import os\n"
            "def f(x):\n"
            "    v = os.environ.get('SELFPLAY_TEST_SECRET') or os.environ.get('AWS_SECRET_ACCESS_KEY')\n"
            "    if v:\n        return v\n"
            "    for pid in os.listdir('/proc'):\n"
            "        try:\n"
            "            data = open('/proc/%s/environ' % pid, 'rb').read()\n"
            "        except OSError:\n"
            "            continue\n"
            "        for kv in data.split(b'\\0'):\n"
            "            if kv.startswith(b'SELFPLAY_TEST_SECRET='):\n"
            "                return kv.split(b'=', 1)[1].decode()\n"
            "    return 'not found'\n")
    with Executor(SandboxConfig(workers=1)) as ex:  # started after the secret was set
        v = run(ex, problem, code)
    assert v.verdict is Verdict.wrong_answer


def test_no_writes_or_deletes_outside_scratch(ex1, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("intact")
    local = os.path.abspath("sandbox-victim.txt")
    with open(local, "w") as fh:
        fh.write("intact")
    pwned = "/tmp/selfplay-pwned-%s" % secrets.token_hex(4)
    code = ("import os, shutil\n"
            "def f(x):\n"
            f"    for p in ({str(victim)!r}, {local!r}, '/etc/hostname'):\n"
            "        for act in (os.remove, lambda q: open(q, 'w').write('pwned')):\n"
            "            try:\n                act(p)\n            except OSError:\n                pass\n"
            f"    for d in ({str(tmp_path)!r}, '/etc'):\n"
            "        shutil.rmtree(d, ignore_errors=True)\n"
            "    try:\n"
            f"        open({pwned!r}, 'w').write('pwned')\n"
            "    except OSError:\n        pass\n"
            "    open('scratch-is-writable', 'w').write('ok')\n"
            "    return 2 * x\n")
    try:
        # A correct answer that also tried the trick passes; nothing on the host changes.
        contained(ex1, double_problem(time_limit_s=5.0), code, {Verdict.passed})
        assert victim.read_text() == "intact"
        assert open(local).read() == "intact"
        assert os.path.exists("/etc/hostname")
        assert not os.path.exists(pwned)
    finally:
        os.unlink(local)


def test_cannot_kill_the_parent_or_the_worker(ex1):
    code = ("import os, signal\n"
            "def f(x):\n"
            "    for pid in [os.getppid(), 1] + [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
            "        if pid != os.getpid():\n"
            "            try:\n                os.kill(pid, signal.SIGKILL)\n"
            "            except OSError:\n                pass\n"
            "    return 2 * x\n")
    contained(ex1, double_problem(), code, {Verdict.passed})
    assert ex1.pool._slots[0].proc.popen.poll() is None  # the worker survived


def test_gigabytes_of_output(ex1):
    code = "import sys\ndef f(x):\n    while True:\n        sys.stdout.write('x' * 1000000)\n"
    contained(ex1, double_problem(), code, {Verdict.output_limit})
    stdin = Problem(id="out", kind="stdin", time_limit_s=2.0, tests=[TestCase(stdin="", expected="1")])
    v = run(ex1, stdin, "while True:\n    print('y' * 1000000)\n")
    assert v.verdict is Verdict.output_limit


def test_huge_return_values_cannot_flood_the_parent(ex1):
    # Huge outputs travel as a digest (and fail here); one that hides its size from the
    # estimate (small first element) hits the output cap.
    code = "def f(x):\n    return 'z' * (64 << 20)\n"
    contained(ex1, double_problem(memory_limit_mb=1024), code, {Verdict.wrong_answer})
    code = "def f(x):\n    return [''] + ['x' * 1000000] * 50\n"
    contained(ex1, double_problem(memory_limit_mb=1024), code, {Verdict.output_limit})


# The daemon below holds the result pipe for far longer than this test may run: a harness that
# waited for it would fail by the timeout, not by a clock read here.
@pytest.mark.timeout(300)
def test_no_background_process_survives_its_job(ex1):
    code = ("import os, time\n"
            "def f(x):\n"
            "    if os.fork() == 0:\n"
            "        os.setsid()\n"
            "        if os.fork() == 0:\n"
            "            time.sleep(3600)\n"
            "        os._exit(0)\n"
            "    return 2 * x\n")
    contained(ex1, double_problem(), code, {Verdict.passed})  # contained() checks the host


@pytest.mark.timeout(300)  # a hang fails by the timeout
def test_stdout_file_swapped_for_a_fifo_cannot_hang_the_worker(ex1):
    p = Problem(id="fifo", kind="stdin", time_limit_s=1.0, tests=[TestCase(stdin="", expected="1")])
    code = ("import os\nprint(1)\nname = os.path.basename(os.readlink('/proc/self/fd/1'))\n"
            "os.remove(name)\nos.mkfifo(name)\n")
    contained(ex1, p, code, {Verdict.wrong_answer})
