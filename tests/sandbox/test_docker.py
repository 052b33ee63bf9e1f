"""Docker backend: verdict parity with the local backend, and the protections inside the container.

Runs where a Docker daemon answers and the executor image exists (infra/README.md says how to
start one and build the image offline); otherwise every test is skipped with the reason.
"""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from selfplay_core.problems import Problem, Sample, TestCase, Verdict
from selfplay_core.sandbox import Executor, SandboxConfig, SandboxUnavailable

pytestmark = pytest.mark.docker

IMAGE = os.environ.get("SELFPLAY_EXECUTOR_IMAGE", "selfplay-executor:latest")
SECRET = "sp-secret-7f3a9c1e"


def _why_no_docker() -> str | None:
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed (pip install docker)"
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as e:
        return f"no Docker daemon answers ({type(e).__name__}); start one as infra/README.md says"
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        return f"executor image {IMAGE} is missing; build it with infra/build_executor_image.sh"
    finally:
        client.close()
    return None


@pytest.fixture(scope="module")
def docker_ok():
    why = _why_no_docker()
    if why:
        pytest.skip(why)


def _executor(**kw) -> Executor:
    kw.setdefault("docker_image", IMAGE)
    return Executor(SandboxConfig(backend="docker", **kw))


@pytest.fixture(scope="module")
def dex(docker_ok):
    os.environ["SELFPLAY_TEST_SECRET"] = SECRET  # set in the parent before any container starts
    ex = _executor(workers=2)
    ex.pool.start()
    yield ex
    ex.close()
    os.environ.pop("SELFPLAY_TEST_SECRET", None)


@pytest.fixture(scope="module")
def dex1(docker_ok):
    """One worker: consecutive samples run in the same container."""
    ex = _executor(workers=1, docker_memory_mb=512, docker_pids_limit=64)
    ex.pool.start()
    yield ex
    ex.close()


@pytest.fixture(scope="module")
def lex():
    ex = Executor(SandboxConfig(backend="local", workers=2))
    yield ex
    ex.close()


def call_problem(pid="p", entry="f", tests=((1, 2), (2, 4), (3, 6)), **kw):
    kw.setdefault("time_limit_s", 1.0)
    return Problem(id=pid, kind="call", entry_point=entry,
                   tests=[TestCase(args=[a], expected=e) for a, e in tests], **kw)


def stdin_problem(pid="s", tests=(("1 2\n", "3\n"), ("5 5\n", "10\n")), **kw):
    kw.setdefault("time_limit_s", 1.0)
    return Problem(id=pid, kind="stdin", tests=[TestCase(stdin=i, expected=o) for i, o in tests],
                   **kw)


def verdict_of(ex, problem, code):
    return ex.verify([(problem, Sample(problem.id, 0, code))])[0]


def observe(ex, code, arg=0):
    """Run `f(arg)` in the sandbox and return what it returned (the sandbox's own view)."""
    p = call_problem(tests=((arg, None),), time_limit_s=5.0)
    r = ex.run([(p, code)])[0]
    assert r.ok, (r.detail, r.errors)
    return r.outputs[0]


DOUBLE = "def f(x):\n    return 2 * x\n"
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"

PARITY = [
    ("call-pass", call_problem(), DOUBLE, Verdict.passed),
    ("call-wrong", call_problem(), "def f(x):\n    return 2 * x + (x == 3)\n", Verdict.wrong_answer),
    ("call-type", call_problem(), "def f(x):\n    return str(2 * x)\n", Verdict.wrong_answer),
    ("call-runtime", call_problem(), "def f(x):\n    return 1 / 0\n", Verdict.runtime_error),
    ("call-load", call_problem(), "raise ValueError('at import')\n", Verdict.runtime_error),
    ("call-missing-entry", call_problem(), "def g(x):\n    return 2 * x\n", Verdict.runtime_error),
    ("call-exit0", call_problem(), "import sys\nsys.exit(0)\n", Verdict.runtime_error),
    ("call-compile", call_problem(), "def f(x)\n    return x\n", Verdict.compile_error),
    ("call-timeout", call_problem(), "def f(x):\n    while True:\n        pass\n", Verdict.timeout),
    ("call-memory", call_problem(memory_limit_mb=256), "def f(x):\n    return [0] * (10 ** 10)\n",
     Verdict.memory_limit),
    ("method-pass", call_problem(entry="Solution.twice"),
     "class Solution:\n    def twice(self, x: int) -> int:\n        return x * 2\n", Verdict.passed),
    ("method-wrong", call_problem(entry="Solution.twice"),
     "class Solution:\n    def twice(self, x):\n        return x\n", Verdict.wrong_answer),
    ("stdlib", call_problem(),
     "import math, collections, heapq, itertools, functools, re\nfrom typing import List\n"
     "def f(x: int) -> int:\n    return int(math.sqrt(4 * x * x))\n", Verdict.passed),
    ("stdin-pass", stdin_problem(), ADD, Verdict.passed),
    ("stdin-read-all", stdin_problem(),
     "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n", Verdict.passed),
    ("stdin-dev-stdin", stdin_problem(),
     "print(sum(map(int, open('/dev/stdin').read().split())))\n", Verdict.passed),
    ("stdin-wrong", stdin_problem(), "print(3)\n", Verdict.wrong_answer),
    ("stdin-exit2", stdin_problem(), ADD + "raise SystemExit(2)\n", Verdict.runtime_error),
    ("stdin-eof", stdin_problem(), "input()\ninput()\n", Verdict.runtime_error),
    ("stdin-compile", stdin_problem(), "print(\n", Verdict.compile_error),
    ("stdin-timeout", stdin_problem(), "while True:\n    pass\n", Verdict.timeout),
    ("stdin-float", stdin_problem(tests=(("1 3\n", "0.333333333\n"),)),
     "a, b = map(int, input().split())\nprint(a / b)\n", Verdict.passed),
]


def test_verdict_parity_with_local_backend(dex, lex):
    items = [(p, Sample(p.id, i, code)) for i, (_, p, code, _) in enumerate(PARITY)]
    t0 = time.monotonic()
    dv = dex.verify(items, early_exit=False)
    d_wall = time.monotonic() - t0
    lv = lex.verify(items, early_exit=False)
    for (name, _, _, want), d, loc in zip(PARITY, dv, lv):
        assert d.verdict is want, (name, d.to_json())
        assert d.verdict is loc.verdict, (name, d.to_json(), loc.to_json())
        assert [t.verdict for t in d.tests] == [t.verdict for t in loc.tests], name
    print(f"\n{len(items)} parity samples on docker: {d_wall:.2f} s")


def test_containers_are_locked_down(dex):
    import docker
    client = docker.from_env()
    try:
        for slot in dex.pool._slots:
            info = client.api.inspect_container(slot.proc.container_id)
            hc = info["HostConfig"]
            assert hc["NetworkMode"] == "none"
            assert hc["ReadonlyRootfs"] is True
            assert hc["CapDrop"] == ["ALL"] and not hc["CapAdd"]
            assert "no-new-privileges" in hc["SecurityOpt"]
            assert hc["Memory"] == hc["MemorySwap"] == 2048 << 20
            assert hc["PidsLimit"] == 64
            assert hc["AutoRemove"] is True
            assert hc["Privileged"] is False
            assert info["Config"]["User"] == "65534:65534"
            assert sorted(info["Config"]["Env"]) == ["LANG=C.UTF-8", "PATH=/usr/bin:/bin"]
    finally:
        client.close()


def test_sandbox_identity(dex):
    code = ("import os\n"
            "def f(x):\n"
            "    caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')]\n"
            "    return [os.getuid(), os.getgid(), os.getppid(), caps[0]]\n")
    uid, gid, ppid, caps = observe(dex, code)
    assert (uid, gid) == (65534, 65534)
    assert ppid == 1  # the worker is the container's init
    assert int(caps, 16) == 0


def test_no_network(dex):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    port = srv.getsockname()[1]
    code = ("import os, socket\n"
            "def f(port):\n"
            "    out = []\n"
            "    for host in ('127.0.0.1', '10.0.0.1', '1.1.1.1', '" + socket.gethostname() + "'):\n"
            "        try:\n"
            "            socket.create_connection((host, port), timeout=1).close()\n"
            "            out.append('connected ' + host)\n"
            "        except OSError:\n"
            "            pass\n"
            "    return [out, sorted(os.listdir('/sys/class/net'))]\n")
    connected, ifaces = observe(dex, code, port)
    srv.setblocking(False)
    try:
        srv.accept()[0].close()  # a connection that got through would be queued here
        hits = ["accepted"]
    except BlockingIOError:
        hits = []
    srv.close()
    assert connected == [] and hits == []
    assert ifaces == ["lo"]


def test_parent_environment_not_visible(dex):
    code = ("import os\n"
            "def f(x):\n"
            "    seen = [repr(dict(os.environ))]\n"
            "    for pid in [p for p in os.listdir('/proc') if p.isdigit()] + ['self']:\n"
            "        try:\n"
            "            seen.append(open('/proc/%s/environ' % pid, 'rb').read().decode('latin-1'))\n"
            "        except OSError as e:\n"
            "            seen.append(type(e).__name__)\n"
            "    return '\\n'.join(seen)\n")
    assert os.environ.get("SELFPLAY_TEST_SECRET") == SECRET
    seen = observe(dex, code)
    assert SECRET not in seen and "SELFPLAY_TEST_SECRET" not in seen


def test_no_writes_outside_tmp_and_tmp_does_not_carry_over(dex1):
    code = ("import os\n"
            "def f(x):\n"
            "    wrote = []\n"
            "    for d in ('/', '/etc', '/usr/lib', '/root', '/var/tmp', '/home', '/dev', '/dev/shm',\n"
            "              '/run', '/proc/sys/kernel', '/sys/fs/cgroup', '/usr/bin'):\n"
            "        try:\n"
            "            with open(os.path.join(d, 'pwned'), 'w') as fh:\n"
            "                fh.write('x')\n"
            "            wrote.append(d)\n"
            "        except OSError:\n"
            "            pass\n"
            "    for p in ('/etc/passwd', '/usr/bin/python3'):\n"
            "        try:\n"
            "            open(p, 'a').close()\n"
            "            wrote.append(p)\n"
            "        except OSError:\n"
            "            pass\n"
            "    writable = []\n"
            "    for root, dirs, files in os.walk('/'):\n"
            "        if root.startswith(('/proc', '/sys', '/tmp')):\n"
            "            dirs[:] = []\n"
            "            continue\n"
            "        if os.access(root, os.W_OK):\n"
            "            writable.append(root)\n"
            "    with open('/tmp/carry', 'w') as fh:\n"
            "        fh.write('from an earlier sample')\n"
            "    return [wrote, writable]\n")
    wrote, writable = observe(dex1, code)
    assert wrote == []
    assert writable == []
    after = observe(dex1, "import os\ndef f(x):\n    return sorted(os.listdir('/tmp'))\n")
    assert after == ["sp-scratch"]


FORK_BOMB = ("import os\n"
             "def f(x):\n"
             "    while True:\n"
             "        try:\n"
             "            os.fork()\n"
             "        except OSError:\n"
             "            pass\n")
SETSID_FORK_BOMB = ("import os\n"
                    "def f(x):\n"
                    "    while True:\n"
                    "        try:\n"
                    "            if os.fork() == 0:\n"
                    "                os.setsid()\n"
                    "        except OSError:\n"
                    "            pass\n")
MEMORY_BOMB = ("def f(x):\n"
               "    a = []\n"
               "    while True:\n"
               "        a.append(bytearray(1 << 20))\n")
# Per-process limit (1 GiB) above the container's (512 MiB), pages actually touched, in several
# processes: only the container's memory cgroup can stop it (the OOM killer, not the worker).
CGROUP_MEMORY_BOMB = ("import os\n"
                      "def f(x):\n"
                      "    for _ in range(3):\n"
                      "        if os.fork() == 0:\n"
                      "            break\n"
                      "    a = []\n"
                      "    while True:\n"
                      "        a.append(b'x' * (1 << 20))\n")
LIST_OTHERS = ("import os\n"
               "def f(x):\n"
               "    me = os.getpid()\n"
               "    return sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, me))\n")


@pytest.mark.parametrize("code,problem_kw", [
    (FORK_BOMB, {}),
    (SETSID_FORK_BOMB, {}),
    (MEMORY_BOMB, {"memory_limit_mb": 256}),
    (CGROUP_MEMORY_BOMB, {"memory_limit_mb": 1024, "time_limit_s": 5.0}),
], ids=["fork-bomb", "setsid-fork-bomb", "memory-bomb", "cgroup-memory-bomb"])
def test_bombs_fail_and_next_sample_is_verified(dex1, code, problem_kw):
    proc = dex1.pool._slots[0].proc
    v = verdict_of(dex1, call_problem(**problem_kw), code)
    assert v.verdict not in (Verdict.passed, Verdict.harness_error), v.to_json()
    assert observe(dex1, LIST_OTHERS) == []  # nothing of the bomb is left
    assert verdict_of(dex1, call_problem(), DOUBLE).passed
    assert dex1.pool._slots[0].proc is proc  # the same container survived it


def test_background_process_is_gone_after_the_job(dex1):
    code = ("import os, time\n"
            "def f(x):\n"
            "    if os.fork() == 0:\n"
            "        os.setsid()\n"
            "        if os.fork() == 0:\n"
            "            while True:\n"
            "                time.sleep(0.01)\n"
            "        os._exit(0)\n"
            "    return 2 * x\n")
    assert verdict_of(dex1, call_problem(), code).passed  # a correct answer that also tried it
    assert observe(dex1, LIST_OTHERS) == []


def test_worker_is_shielded_from_its_children(dex1):
    proc = dex1.pool._slots[0].proc
    code = ("import os, signal\n"
            "def f(x):\n"
            "    tried = []\n"
            "    for path in ('/proc/1/fd/1', '/proc/1/mem'):\n"
            "        try:\n"
            "            open(path, 'wb').close()\n"
            "            tried.append(path)\n"
            "        except OSError:\n"
            "            pass\n"
            "    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL, signal.SIGSTOP):\n"
            "        try:\n"
            "            os.kill(1, sig)\n"
            "        except OSError:\n"
            "            pass\n"
            "    return [2 * x, tried]\n")
    p = call_problem(tests=((1, [2, []]), (2, [4, []])))
    v = verdict_of(dex1, p, code)
    assert v.passed, v.to_json()  # the worker saw no signal and no fd or memory was opened
    assert verdict_of(dex1, call_problem(), DOUBLE).passed
    assert dex1.pool._slots[0].proc is proc


def test_close_removes_containers(docker_ok):
    import docker
    client = docker.from_env()
    ex = _executor(workers=2)
    ex.pool.start()
    ids = [s.proc.container_id for s in ex.pool._slots]
    assert verdict_of(ex, call_problem(), DOUBLE).passed
    ex.close()
    left = {c.id for c in client.containers.list(all=True)}
    client.close()
    assert not left & set(ids)


def test_containers_end_when_the_parent_dies(docker_ok, tmp_path):
    import docker
    script = ("import sys, time\n"
              "from selfplay_core.sandbox import SandboxConfig\n"
              "from selfplay_core.sandbox.docker_backend import DockerLauncher\n"
              f"w = DockerLauncher(SandboxConfig(backend='docker', docker_image={IMAGE!r})).spawn(0)\n"
              "print(w.container_id, flush=True)\n"
              "time.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    cid = child.stdout.readline().decode().strip()
    assert len(cid) == 64
    child.send_signal(signal.SIGKILL)
    child.wait()
    client = docker.from_env()
    end = time.monotonic() + 15
    while time.monotonic() < end:
        if cid not in {c.id for c in client.containers.list(all=True)}:
            break
        time.sleep(0.2)
    else:
        client.api.remove_container(cid, force=True)
        pytest.fail("container outlived its parent")
    client.close()


def test_clear_errors(docker_ok, monkeypatch):
    with pytest.raises(SandboxUnavailable, match="is not on the Docker daemon.*build_executor_image"):
        _executor(docker_image="selfplay-executor:no-such-tag")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxUnavailable, match="no Docker daemon answers"):
        _executor()


def test_image_without_python_fails_clearly(docker_ok, tmp_path):
    import docker
    client = docker.from_env()
    tag = "selfplay-executor-test:no-python"
    # A root file system with no interpreter: the container cannot start the worker.
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hostname").write_text("x\n")
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(tmp_path / "etc", arcname="etc")
    client.api.import_image_from_data(buf.getvalue(), repository=tag.split(":")[0],
                                      tag=tag.split(":")[1])
    try:
        ex = _executor(docker_image=tag, workers=1)
        with pytest.raises(SandboxUnavailable, match="container"):
            ex.pool.start()
        ex.close()
    finally:
        client.images.remove(tag, force=True)
        client.close()
