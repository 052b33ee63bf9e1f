"""benchmarks/gpu_check.py --smoke on CPU, so the script prepared for the lent accelerator does
not rot: every section runs, the summary is one JSON object, and nothing it imports (directly or
through selfplay modules) needs vLLM, TRL, Prefect or MLflow, which that machine lacks."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_smoke_runs_on_cpu_and_prints_one_json_summary(tmp_path):
    out = tmp_path / "summary.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--smoke",
                           "--peak-tflops", "1", "--steps", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert json.loads(out.read_text()) == summary
    assert summary["mode"] == "smoke" and summary["env"]["device"] == "cpu"
    assert summary["blocked_imports_attempted"] == []
    assert set(summary["learner"]) == {"0.5b", "1.5b", "7b", "7b-lora"}
    for key, case in summary["learner"].items():
        assert "error" not in case, (key, case)
        assert case["tokens_per_s"] > 0 and case["loss_finite"] and case["mfu"] is not None
        assert case["mfu"] == round(6 * case["params"] * case["tokens_per_s"] / 1e12, 4)
    lora = summary["learner"]["7b-lora"]
    assert 0 < lora["trainable_params"] < lora["params"]
    for case in summary["generation"].values():
        assert "error" not in case and case["tokens_per_s"] > 0
    toy = summary["toy_loop"]
    assert "skipped" in toy or "result" in toy, toy


def test_gpu_check_blocks_the_packages_the_accelerator_lacks():
    code = ("import sys; sys.argv=['x']; sys.path.insert(0, 'benchmarks'); import gpu_check\n"
            "import importlib.util\n"
            "assert importlib.util.find_spec('vllm') is None and importlib.util.find_spec('mlflow') is None\n"
            "try:\n    import trl\nexcept ImportError:\n    pass\nelse:\n    raise SystemExit('trl imported')\n"
            "print(gpu_check.ATTEMPTED)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['trl']"
