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


def test_resume_of_a_folder_that_does_not_exist_says_so_before_heavy_imports(tmp_path):
    rc, heavy, err = probe(["run", "--resume", str(tmp_path / "no-such-run")], tmp_path)
    assert rc == 2 and heavy == [] and "Traceback" not in err
    assert err == f"selfplay run: error: --resume {tmp_path / 'no-such-run'}: no such folder " \
                  "(give the run folder, out_dir/<run name>, that holds state.json)"


def test_an_unknown_key_gets_the_nearest_known_one_and_where_the_keys_are(tmp_path):
    rc, heavy, err = probe(["run", "--set", "tracking.mlflow_url=http://x"], tmp_path)
    assert rc == 2 and heavy == []
    assert "tracking.mlflow_url: unknown key; did you mean tracking.mlflow_uri?" in err
    assert "`selfplay run --dry-run` prints every key" in err
    # The method section offers the chosen method's keys, not another method's.
    rc, _, err = probe(["run", "--set", "method=azr", "--set", "method.lemma_band=[0.2, 0.5]"], tmp_path)
    assert rc == 2 and "did you mean" not in err
    assert "the keys of method are name, advantage, task_types, references" in err
    rc, _, err = probe(["run", "--set", "method.lemma_bnd=[0.2, 0.5]"], tmp_path)  # gasp, the default
    assert rc == 2 and "did you mean method.lemma_band?" in err


def test_help_names_every_registered_method(tmp_path):
    import selfplay_core.worlds  # noqa: F401 (its plug-ins register the toy world's oracle arms, as a run's config does)
    from selfplay_core.methods import registered

    out = subprocess.run([sys.executable, "-m", "selfplay_cli.main", "--help"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                                      "COLUMNS": "300"})
    assert out.returncode == 0
    line = next(ln for ln in out.stdout.splitlines() if ln.strip().startswith("run "))
    assert sorted(line.split("method.name: ", 1)[1].split(", ")) == sorted(registered())
