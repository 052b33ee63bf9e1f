"""The test tiers: `make test` leaves the system tier out, `make test-all` (CI) runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def collected(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          *args], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode in (0, 5), out.stdout[-2000:] + out.stderr[-2000:]
    return {ln.split("::", 1)[0] for ln in out.stdout.splitlines() if "::" in ln}


def test_the_system_tier_is_what_starts_real_services():
    files = ["tests/engines/test_vllm_real.py", "tests/storage/test_storage_rgw.py",
             "tests/storage/test_storage_local.py", "tests/test_rewards.py"]
    system = collected("-m", "system", *files)
    rest = collected("-m", "not system", *files)
    # vLLM servers and Ceph RGW are system; a local store and pure rewards are not.
    assert system == {"tests/engines/test_vllm_real.py", "tests/storage/test_storage_rgw.py"}
    assert rest == {"tests/storage/test_storage_local.py", "tests/test_rewards.py"}


def test_every_listed_system_file_exists():
    # Read from the source: several test folders have a module named `conftest`.
    import ast

    tree = ast.parse((TESTS / "conftest.py").read_text())
    listed = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                  and any(getattr(t, "id", None) == "SYSTEM_FILES" for t in node.targets))
    assert listed and [f for f in listed if not (TESTS / f).is_file()] == []


def test_make_test_runs_the_fast_tiers_and_make_test_all_runs_everything():
    def recipe(target):
        out = subprocess.run(["make", "-n", "-C", str(REPO), target, "VENV=/nonexistent/venv"],
                             capture_output=True, text=True, timeout=60)
        return [ln for ln in out.stdout.splitlines() if "-m pytest" in ln]

    assert [ln.split("-m pytest", 1)[1].strip() for ln in recipe("test")] == ['-m "not system"']
    assert [ln.split("-m pytest", 1)[1].strip() for ln in recipe("test-all")] == [""]
