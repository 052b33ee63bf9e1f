"""tools/gpu_check.py, the prepared check for a lent accelerator, on CPU.

The lent machine has torch, transformers, accelerate and peft but no pydantic, vLLM, TRL,
Prefect, MLflow or datasets, and no package index. tests/support/lent_machine_site makes this
interpreter (and every section process) look like that: those packages are hidden from the path
finder. pydantic then comes from a carried folder made by tools/gpu_check_deps.py. The smoke
run executes every section that can run on a CPU with tiny shapes and marks the GPU-only ones.
(Before, the check imported pydantic through selfplay's configs and could not start there.)
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "tools" / "gpu_check.py"
DEPS = ROOT / "tools" / "gpu_check_deps.py"
LENT = ROOT / "tests" / "support" / "lent_machine_site"
SECTIONS = ["probe", "learner_7b", "bf16_visibility", "sync", "colocation", "generation",
            "logprobs", "toy_iteration"]
GPU_ONLY = {"colocation"}


def lent_env(allow: Path | None = None, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_CHECK_DEPS", "GPU_CHECK_FAULT")}
    env.update(PYTHONPATH=f"{LENT}{os.pathsep}{ROOT}", CUDA_VISIBLE_DEVICES="", **extra)
    if allow is not None:
        env["LENT_MACHINE_ALLOW"] = str(allow)
    return env


def check(*args, env, timeout=2400, cwd=None):
    return subprocess.run([sys.executable, str(CHECK), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd or ROOT)


@pytest.fixture(scope="module")
def carried(tmp_path_factory):
    """A carried dependency folder for this interpreter (copied from this environment: the
    download path is tested below, for another Python)."""
    out = tmp_path_factory.mktemp("deps") / "gpu_check_deps"
    proc = subprocess.run([sys.executable, str(DEPS), "--from-installed", "--out", str(out),
                           "--python", f"{sys.version_info.major}.{sys.version_info.minor}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_the_lent_machine_emulation_hides_pydantic():
    code = ("import importlib.util, sys\n"
            "assert importlib.util.find_spec('pydantic') is None\n"
            "assert importlib.util.find_spec('mlflow') is None\n"
            "import torch, transformers, accelerate, peft\n"
            "try:\n    import selfplay_core.rl.learner\nexcept ImportError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=lent_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "No module named 'pydantic'" in proc.stdout  # what the old check died of


def test_dry_run_prints_each_sections_expected_time_within_eight_minutes():
    proc = check("--dry-run", env=lent_env())
    assert proc.returncode == 0, proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"(\w+)\s+(gpu only|gpu\+cpu)\s+(\d+)\s+(\d+)$", line)
        if m:
            rows[m.group(1)] = (m.group(2), int(m.group(3)), int(m.group(4)))
    assert list(rows) == SECTIONS
    assert {n for n, r in rows.items() if r[0] == "gpu only"} == GPU_ONLY
    assert all(0 < exp <= cap for _, exp, cap in rows.values())
    assert sum(cap for *_, cap in rows.values()) <= 480 - 10  # hard limits, with start-up room
    total = re.search(r"total\s+(\d+)\s+(\d+)", proc.stdout)
    assert (int(total.group(1)), int(total.group(2))) == (
        sum(r[1] for r in rows.values()), sum(r[2] for r in rows.values()))


def test_without_pydantic_or_a_carried_copy_it_says_what_to_run(tmp_path):
    proc = check("--smoke", "--out", str(tmp_path / "out"), "--deps", str(tmp_path / "none"),
                 env=lent_env())
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "gpu_check_deps.py" in proc.stderr and "pydantic is not installed" in proc.stderr
    assert not (tmp_path / "out" / "sections.jsonl").exists()  # nothing started


def test_a_carried_folder_for_another_python_is_refused(tmp_path):
    deps = tmp_path / "deps"
    (deps / "site").mkdir(parents=True)
    (deps / "manifest.json").write_text(json.dumps({"python": "3.99"}))
    proc = check("--smoke", "--out", str(tmp_path / "out"), "--deps", str(deps), env=lent_env())
    assert proc.returncode == 2 and "made for CPython 3.99" in proc.stderr


def test_smoke_runs_every_cpu_section_on_a_machine_without_pydantic(tmp_path, carried):
    out = tmp_path / "out"
    # The per-section cap is a hang ceiling, not a time target: the headless toy iteration took
    # over 420 s (the script's default cap) on a 2-core box at load 13 that runs it in ~60 s idle.
    proc = check("--smoke", "--out", str(out), "--deps", str(carried), "--peak-tflops", "1",
                 "--smoke-timeout-s", "1500", env=lent_env(allow=carried / "site"), timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(l) for l in (out / "sections.jsonl").read_text().splitlines()]
    assert [l["section"] for l in lines] == SECTIONS
    by = {l["section"]: l for l in lines}
    for name, line in by.items():
        want = "gpu_only" if name in GPU_ONLY else "ok"
        assert line["status"] == want, (name, line.get("error"), line.get("log_tail"))
        assert line["blocked_imports_attempted"] == [], name
        assert line["device"] == "cpu" and line["seconds"] <= line["timeout_s"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pydantic"] == "carried"
    assert by["probe"]["result"]["pydantic_source"] == "carried"
    assert by["probe"]["result"]["pydantic"] == json.loads(
        (carried / "manifest.json").read_text())["packages"]["pydantic"]

    learner = by["learner_7b"]["result"]
    for run in (learner["configured_80gb"], learner["smaller"]):
        assert run["loss_finite"] and run["tokens_per_s"] > 0
        assert isinstance(run["mfu"], float) and run["mfu"] > 0   # the formula: test_mfu_by_hand
    vis = by["bf16_visibility"]["result"]
    assert vis["before: torch AdamW on bf16"]["update_arrived_projection"] < 0.2
    assert 0.8 < vis["after: stochastic (pure)"]["update_arrived_projection"] < 1.2
    assert vis["after: master"]["update_arrived_projection"] > 0.99
    sync = by["sync"]["result"]
    assert sync["fs_checksums_match"] and sync["ipc"] == {"gpu_only": "CUDA IPC handles need a CUDA device"}
    gen = by["generation"]["result"]
    assert gen["tokens"] == gen["batch"] * gen["new_tokens"] and 0 < gen["share_of_roofline_measured_copy_bandwidth"] < 1
    lp = by["logprobs"]["result"]
    for t in ("1.0", "0.4"):
        assert lp[f"float32_T{t}"]["tokens"] > 0 and lp[f"float32_T{t}"]["max_abs"] < 1e-3
    toy = by["toy_iteration"]["result"]["result"]
    assert len(toy["history"]) == 1 and toy["history"][0]["learner/tokens"] > 0
    # stdout carries the same lines as they finished, then the summary
    printed = [json.loads(l) for l in proc.stdout.splitlines()]
    assert [p["section"] for p in printed[:-1]] == SECTIONS and "summary" in printed[-1]


def test_a_hung_and_a_crashed_section_leave_the_others_results(tmp_path, carried):
    out = tmp_path / "out"
    proc = check("--smoke", "--out", str(out), "--deps", str(carried), "--smoke-timeout-s", "20",
                 "--sections", "probe,colocation,bf16_visibility",
                 env=lent_env(allow=carried / "site",
                              GPU_CHECK_FAULT="probe:hang,bf16_visibility:crash"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(l) for l in (out / "sections.jsonl").read_text().splitlines()]
    assert [(l["section"], l["status"]) for l in lines] == [
        ("probe", "timeout"), ("colocation", "gpu_only"), ("bf16_visibility", "crashed")]
    assert lines[0]["seconds"] >= 20 and lines[2]["exit_code"] == 3
    alive = []
    for pid in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(out) in cmd:
            alive.append(cmd)
    assert alive == []  # the hung section's process group was killed


def test_the_deps_script_fetches_exact_wheels_for_another_python(tmp_path):
    """The download path (a package index is needed: CI installs from one anyway)."""
    other = "3.12" if sys.version_info[:2] != (3, 12) else "3.11"
    out = tmp_path / "deps"
    proc = subprocess.run([sys.executable, str(DEPS), "--python", other, "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    import importlib.metadata as md

    assert manifest["python"] == other and manifest["source"] == "wheels"
    assert manifest["packages"]["pydantic"] == md.version("pydantic")
    tag = "cpython-" + other.replace(".", "")
    assert any(tag in f.name for f in (out / "site" / "pydantic_core").glob("*.so"))
    assert manifest["bytes"] < 32 * 2**20  # well inside the 64 MiB a lent machine can be carried
    proc = check("--smoke", "--out", str(tmp_path / "o"), "--deps", str(out), env=lent_env())
    assert proc.returncode == 2 and f"made for CPython {other}" in proc.stderr
