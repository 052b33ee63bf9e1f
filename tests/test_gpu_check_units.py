"""Pieces of the GPU check (tools/gpu_check_sections.py) that are plain arithmetic."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "tools" / "gpu_check_sections.py"
_spec = importlib.util.spec_from_file_location("gpu_check_sections", _PATH)
sections = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = sections   # its dataclasses resolve their module by name
_spec.loader.exec_module(sections)


def test_mfu_by_hand():
    # Qwen2.5-7B-class: 7.6e9 parameters at 3,000 tokens/s on a 989 TFLOPS (H100 bf16 dense)
    # card: 6 * 7.6e9 * 3000 = 1.368e14 FLOP/s of model work, 13.8 % of the peak.
    assert sections.utilization(7_600_000_000, 3000.0, 989e12) == pytest.approx(0.1383, abs=1e-4)
    # A recomputed forward (gradient checkpointing) is 8 FLOPs per parameter-token of hardware work.
    assert sections.utilization(7_600_000_000, 3000.0, 989e12,
                                flops_per_param_token=8) == pytest.approx(0.1844, abs=1e-4)
    assert sections.utilization(10, 1.0, None) is None     # no known peak: no figure
