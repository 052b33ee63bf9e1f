"""`make test` / `make run` install the system packages they need when they are missing.

The packages are installed on this machine (and other sessions use them), so "missing" is a
fault that cannot be caused here for real: each test runs the real script, through the real
Makefile targets, with a PATH that holds only recording fakes of `id`, `apt-get` and `sudo`
(and nothing else, so bwrap, radosgw, ceph-* and docker-compose are not found). The fake
apt-get "installs" a package by putting the commands it provides on that PATH, so the script's
check after the install is exercised too. What the tests pin: which packages are asked for,
whether sudo is used, the fallback to `apt-get update`, and the one message when nothing can
install them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")
PROVIDES = {"bubblewrap": ["bwrap"], "radosgw": ["radosgw", "radosgw-admin"],
            "ceph-mon": ["ceph-mon", "monmaptool", "ceph"], "ceph-osd": ["ceph-osd"],
            "docker-compose": ["docker-compose"], "chromium": ["chromium"]}
ALL_TEST_PACKAGES = "bubblewrap radosgw ceph-mon ceph-osd docker-compose chromium"


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@pytest.fixture
def fakes(tmp_path):
    """A bin dir with fakes; returns a function (uid, sudo=, apt=, fail_first_install=) -> env."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "calls.log"
    provides = "\n".join(f'        {pkg}) for c in {" ".join(cmds)}; do printf "#!/bin/sh\\n" > "$BIN/$c"; '
                         f'/bin/chmod +x "$BIN/$c"; done ;;' for pkg, cmds in PROVIDES.items())

    def make_env(uid: int, *, sudo: bool = True, apt: bool = True, fail_first_install: bool = False,
                 installs: bool = True) -> dict:
        for name in ("id", "apt-get", "sudo"):
            (bin_ / name).unlink(missing_ok=True)
        _script(bin_ / "id", f'echo {uid}\n')
        if apt:
            _script(bin_ / "apt-get", f'''BIN={bin_}
echo "apt-get $* (uid=$(id -u), DEBIAN_FRONTEND=$DEBIAN_FRONTEND)" >> {log}
[ "$1" = update ] && {{ /usr/bin/touch {tmp_path}/updated; exit 0; }}
[ "$1" = install ] || exit 3
[ {int(fail_first_install)} = 1 ] && [ ! -e {tmp_path}/updated ] && exit 100
[ {int(installs)} = 1 ] || exit 0
for pkg in "$@"; do
    case $pkg in
{provides}
    esac
done
''')
        if sudo:
            # sudo VAR=value cmd ...: as root (the fake id says 0 from here on).
            _script(bin_ / "sudo", f'''echo "sudo $*" >> {log}
_script_uid() {{ printf '#!/bin/sh\\necho %s\\n' "$1" > {bin_}/id; }}
_script_uid 0
/usr/bin/env "$@"; rc=$?
_script_uid {uid}
exit $rc
''')
        return {"PATH": str(bin_), "HOME": str(tmp_path), "PYTHON": sys.executable,
                "VENV": str(Path(sys.executable).parents[1])}

    make_env.log = log
    make_env.bin = bin_
    return make_env


def run_target(target: str, env: dict) -> subprocess.CompletedProcess:
    # The real Makefile target, as `make test` / `make run` reach it first. make itself is
    # called by absolute path (PATH holds only the fakes); VENV points at this interpreter's
    # venv, so the python3-venv check passes.
    return subprocess.run([MAKE, "-s", "-C", str(REPO), target, f"VENV={env['VENV']}",
                           f"PYTHON={env['PYTHON']}"],
                          env=env, capture_output=True, text=True, timeout=60)


def calls(fakes) -> list[str]:
    return fakes.log.read_text().splitlines() if fakes.log.exists() else []


pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def test_root_installs_every_missing_test_package_with_apt_get(fakes):
    env = fakes(0)
    out = run_target("system-packages-test", env)
    assert out.returncode == 0, out.stderr
    assert calls(fakes) == [f"apt-get install -y --no-install-recommends {ALL_TEST_PACKAGES} "
                            "(uid=0, DEBIAN_FRONTEND=noninteractive)"]
    assert "installing system packages for make test" in out.stdout
    assert "system packages installed." in out.stdout
    # Installed now: a second run asks for nothing.
    fakes.log.unlink()
    assert run_target("system-packages-test", env).returncode == 0 and calls(fakes) == []


def test_run_needs_only_bubblewrap(fakes):
    out = run_target("system-packages-run", fakes(0))
    assert out.returncode == 0, out.stderr
    assert calls(fakes) == ["apt-get install -y --no-install-recommends bubblewrap "
                            "(uid=0, DEBIAN_FRONTEND=noninteractive)"]


def test_not_root_uses_sudo(fakes):
    out = run_target("system-packages-run", fakes(1000))
    assert out.returncode == 0, out.stderr
    assert calls(fakes) == [
        "sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap",
        "apt-get install -y --no-install-recommends bubblewrap (uid=0, DEBIAN_FRONTEND=noninteractive)"]


def test_not_root_without_sudo_names_the_command_and_installs_nothing(fakes):
    out = run_target("system-packages-test", fakes(1000, sudo=False))
    assert out.returncode != 0
    assert calls(fakes) == []
    assert f"apt-get install -y --no-install-recommends {ALL_TEST_PACKAGES}" in out.stderr
    assert "Not root and no sudo" in out.stderr and "make test" in out.stderr
    assert "Traceback" not in out.stderr


def test_stale_package_lists_are_updated_once(fakes):
    out = run_target("system-packages-run", fakes(0, fail_first_install=True))
    assert out.returncode == 0, out.stderr
    assert [c.split(" (")[0] for c in calls(fakes)] == [
        "apt-get install -y --no-install-recommends bubblewrap", "apt-get update",
        "apt-get install -y --no-install-recommends bubblewrap"]


def test_an_install_that_provides_nothing_is_an_error(fakes):
    out = run_target("system-packages-run", fakes(0, installs=False))
    assert out.returncode != 0
    assert "still missing: bwrap" in out.stderr


def test_no_apt_get_is_one_message(fakes):
    out = run_target("system-packages-run", fakes(0, apt=False))
    assert out.returncode != 0 and "No apt-get on this machine" in out.stderr
    assert "bubblewrap" in out.stderr


def test_python_without_ensurepip_gets_python3_venv(fakes, tmp_path):
    env = fakes(0)
    _script(tmp_path / "python3", 'exit 1\n')  # Debian's python3 before python3-venv
    env = {**env, "PYTHON": str(tmp_path / "python3"), "VENV": str(tmp_path / "no-venv")}
    out = run_target("system-packages-run", env)
    # The fake apt-get cannot make the fake python whole, so the check after it still fails;
    # what matters is that python3-venv was asked for, before any venv is created.
    assert calls(fakes)[0].startswith("apt-get install -y --no-install-recommends bubblewrap python3-venv")
    assert out.returncode != 0 and "-m venv" in out.stderr


def test_skip_switch_checks_nothing(fakes):
    env = {**fakes(1000, sudo=False), "SELFPLAY_SKIP_SYSTEM_PACKAGES": "1"}
    assert run_target("system-packages-test", env).returncode == 0 and calls(fakes) == []


def test_make_test_and_make_run_install_system_packages_before_the_venv():
    for target in ("test", "run"):
        out = subprocess.run([MAKE, "-n", "-C", str(REPO), target, "VENV=/nonexistent/venv"],
                             capture_output=True, text=True, timeout=60)
        lines = out.stdout.splitlines()
        first_sys = next(i for i, ln in enumerate(lines) if "infra/system-packages.sh " + target in ln)
        first_venv = next(i for i, ln in enumerate(lines) if "-m venv" in ln)
        assert first_sys < first_venv, out.stdout


def test_ci_runs_what_the_readme_says():
    """`.ci/run` calls `make test-all` (every tier), which the README names, and the README's
    install block is the two commands."""
    ci = [ln.strip() for ln in (REPO / ".ci" / "run").read_text().splitlines()
          if ln.strip() and not ln.strip().startswith("#")]
    commands = [ln for ln in ci if not ln.startswith(("set ", "cd ", "export "))]
    assert commands == ["make test-all"], commands
    readme = (REPO / "README.md").read_text()
    assert "make test-all" in readme
    block = readme.split("## Install and the two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    install = [ln.split("#", 1)[0].strip() for ln in block.strip().splitlines()]
    assert install == ["make test", "make run"], install
