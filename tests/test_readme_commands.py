"""Every shell command of the README runs as written: each line of each ```bash block is checked
by the rule for its program, without doing the command's work — `make -n TARGET`, the `selfplay`
command line parsed by the CLI's own parser (and a run's config and `--set`s loaded and
validated), a deployment name looked up in prefect.yaml with its JSON parameters parsed, a
script's flags found in its own `--help`. A command no rule knows fails the test: a new kind of
command in the README needs a rule here. Also: the README stays a manual (<= 350 lines)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BIN = Path(sys.executable).parent


def readme_commands() -> list[str]:
    """The README's shell commands: the lines of its ```bash blocks, continuation lines joined,
    comments and blank lines dropped."""
    text = README.read_text()
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
        logical = ""
        for line in block.splitlines():
            logical += line
            if logical.endswith("\\"):
                logical = logical[:-1] + " "
                continue
            words = shlex.split(logical, comments=True)
            if words:
                commands.append(shlex.join(words))
            logical = ""
    return commands


def run(argv: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env, **kw)


def flags(words: list[str]) -> list[str]:
    return [w.split("=", 1)[0] for w in words if w.startswith("--")]


# One rule per program. Each returns nothing and fails with what is wrong.

def check_make(words: list[str]) -> None:
    targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    proc = run(["make", "-n", *targets])
    assert proc.returncode == 0, f"`make -n {' '.join(targets)}` failed:\n{proc.stderr}"


def check_selfplay(words: list[str]) -> None:
    from selfplay_cli.main import build_parser

    try:
        args = build_parser().parse_args(words[1:])
    except SystemExit as e:  # argparse's way of refusing a command line
        raise AssertionError(f"`{shlex.join(words)}`: the CLI refuses it (exit {e.code})") from None
    if args.command == "run" and not args.resume:
        from selfplay_core.config import load_config

        load_config(args.config, args.overrides)  # raises, naming the key, on a bad config or --set


def check_prefect(words: list[str]) -> None:
    assert words[1:3] == ["deployment", "run"], f"no rule for `{shlex.join(words)}`"
    name = words[3]
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    known = set()
    for dep in spec["deployments"]:
        path, func = dep["entrypoint"].split(":")
        source = (REPO / path).read_text()
        flow = re.search(r'@flow\(name="([^"]+)"[^)]*\)\s*\ndef ' + re.escape(func) + r"\b", source)
        known.add(f"{flow.group(1) if flow else func}/{dep['name']}")
    assert name in known, f"deployment {name!r} is not in prefect.yaml ({sorted(known)})"
    for i, w in enumerate(words):
        if w == "--param":
            key, value = words[i + 1].split("=", 1)
            assert isinstance(json.loads(value), dict), f"--param {key}: not a JSON object"


def check_mlflow(words: list[str]) -> None:
    exe = BIN / "mlflow"
    assert exe.exists(), f"{exe}: not installed"
    proc = run([str(exe), words[1], "--help"])
    assert proc.returncode == 0, proc.stderr
    for f in flags(words[2:]):
        assert f in proc.stdout, f"`mlflow {words[1]}` has no option {f}"


def check_python(words: list[str]) -> None:
    script = REPO / words[1]
    assert script.is_file(), f"{words[1]}: no such script"
    proc = run([sys.executable, str(script), "--help"])
    assert proc.returncode == 0, proc.stderr
    for f in flags(words[2:]):
        assert f in proc.stdout, f"{words[1]} has no option {f}"


def check_vllm_venv_script(words: list[str]) -> None:
    # --print-path: the script says where that venv is (or would be) and builds nothing.
    args = [os.path.expanduser(w) for w in words[1:]]
    proc = run([str(REPO / words[0]), *args, "--print-path"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == os.path.expanduser(words[-1]), proc.stdout


def check_source(words: list[str]) -> None:
    # `. .venv/bin/activate`: the venv that `make test` / `make run` create (Makefile's VENV).
    assert words[1] == ".venv/bin/activate", words
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^VENV\s*\?=\s*\.venv$", makefile, flags=re.M)
    assert "-m venv $(VENV)" in makefile


def check_export(words: list[str]) -> None:
    # A variable the project (or Prefect, for PREFECT_API_URL) reads.
    name = words[1].split("=", 1)[0]
    readers = ["selfplay_core", "selfplay_cli", "flows", "tasks", "Makefile"]
    found = subprocess.run(["grep", "-rlq", name, *readers], cwd=REPO).returncode == 0
    assert found, f"export {name}: nothing in the project reads it"


RULES = {"make": check_make, "selfplay": check_selfplay, "prefect": check_prefect,
         "mlflow": check_mlflow, "python": check_python, ".": check_source, "export": check_export,
         "infra/vllm/make_venv.sh": check_vllm_venv_script}

COMMANDS = readme_commands()


def test_the_readme_has_commands_and_stays_a_manual():
    assert "make test" in COMMANDS and "make run" in COMMANDS
    assert len(README.read_text().splitlines()) <= 350


@pytest.mark.parametrize("command", COMMANDS)
def test_every_readme_command_runs_as_written(command):
    words = shlex.split(command)
    rule = RULES.get(words[0])
    assert rule is not None, f"no rule checks `{command}`: add one to {Path(__file__).name}"
    rule(words)


def test_every_make_target_the_readme_names_exists():
    """Targets named in the prose (`make test-fast`, `make up`, ...) as well as in the blocks."""
    targets = sorted(set(re.findall(r"`make ([a-z][a-z-]*)", README.read_text())))
    assert "test-lab" in targets
    proc = run(["make", "-n", *targets])
    assert proc.returncode == 0, proc.stderr


def test_the_checks_refuse_a_wrong_command():
    """The rules are not vacuous: a misspelt flag, target, deployment or key is refused."""
    with pytest.raises(AssertionError):
        check_selfplay(["selfplay", "run", "--confg", "configs/tiny-cpu.yaml"])
    with pytest.raises(Exception):
        check_selfplay(["selfplay", "run", "--config", "configs/tiny-cpu.yaml", "--set", "learner.lrr=1"])
    with pytest.raises(AssertionError):
        check_make(["make", "tset"])
    with pytest.raises(AssertionError):
        check_prefect(["prefect", "deployment", "run", "selfplay/weekly"])
    with pytest.raises(AssertionError):
        check_python(["python", "tools/gpu_check.py", "--dryrun"])
