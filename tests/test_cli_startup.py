"""Bad input is rejected before any heavy library is imported (torch, transformers, prefect,
mlflow): what makes a rejection take a fraction of a second rather than several. How long it
takes is measured by benchmarks/cli_startup.py, not here."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "prefect", "mlflow", "datasets", "accelerate")
PROBE = ("import sys, json\nfrom selfplay_cli.main import main\ntry:\n    rc = main(sys.argv[1:])\n"
         "finally:\n    print('HEAVY=' + json.dumps([m for m in %r if m in sys.modules]), file=sys.stderr)\n"
         "sys.exit(rc)\n" % (HEAVY,))


def probe(args, cwd):
    out = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True,
                         timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    lines = out.stderr.strip().splitlines()
    return out.returncode, json.loads(lines[-1][len("HEAVY="):]), "\n".join(lines[:-1])


@pytest.mark.parametrize("content, message", [
    ("iterations: 0\n", "iterations: Input should be greater than or equal to 1"),
    ("foo: 1\n", "foo: unknown key"),
    ("teacher: {lemma_band: [0.9, 0.1]}\n", "lemma_band"),
])
def test_a_bad_config_is_rejected_before_heavy_imports(tmp_path, content, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    rc, heavy, err = probe(["run", "--config", str(bad)], tmp_path)
    assert rc == 2 and message in err and "Traceback" not in err
    assert heavy == []


def test_a_bad_override_and_a_dry_run_import_nothing_heavy(tmp_path):
    rc, heavy, err = probe(["run", "--set", "learner.lr=-1"], tmp_path)
    assert rc == 2 and "learner.lr" in err and heavy == []
    rc, heavy, _ = probe(["run", "--config", str(REPO / "configs" / "tiny-cpu.yaml"), "--dry-run"], tmp_path)
    assert rc == 0 and heavy == []


def test_version_is_the_installed_packages_and_imports_nothing_heavy(tmp_path):
    import tomllib

    want = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    out = subprocess.run([sys.executable, "-c", PROBE.replace("file=sys.stderr", "file=sys.stdout"), "--version"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0, out.stderr
    assert lines[0] == f"selfplay {want}"
    assert json.loads(lines[-1][len("HEAVY="):]) == []
