"""Issue 11, class 8: benchmark time limits come from one rule on the canonical solution's
measured CPU time, and the expected-output cache never holds a load-dependent result."""

import json
import os
import signal
import threading
import time

import pytest

from selfplay_core.datasets import expected as exp_mod
from selfplay_core.datasets.expected import attach_expected, cache_dir
from selfplay_core.datasets.limits import MIN_TIME_LIMIT_S, TIME_FACTOR, time_limit_from_reference
from selfplay_core.problems import InputError, Problem, TestCase
from selfplay_core.sandbox import Executor, SandboxConfig

LIMITS = [
    # CPU seconds per test -> limit: max(1 s, 4 x the slowest)
    ([], 1.0),
    ([0.001, 0.002], 1.0),
    ([0.25], 1.0),
    ([0.3, 0.1], 1.2),
    ([2.0, 0.5, 0.01], 8.0),
]


@pytest.mark.parametrize("cpu,limit", LIMITS)
def test_the_one_limit_rule(cpu, limit):
    assert time_limit_from_reference(cpu) == pytest.approx(limit)
    assert (MIN_TIME_LIMIT_S, TIME_FACTOR) == (1.0, 4.0)


def problem(pid, n=5):
    return Problem(id=pid, kind="call", entry_point="f", time_limit_s=1.0, memory_limit_mb=512,
                   tests=[TestCase(args=[i], has_expected=False) for i in range(n)])


BURN = ("import time\n"
        "def f(x):\n"
        "    t = time.process_time()\n"
        "    while time.process_time() - t < 0.3:\n"
        "        pass\n"
        "    return x * x\n")
FAST = "def f(x):\n    return x + 1\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SELFPLAY_CACHE", str(tmp_path))
    return tmp_path


def rows(key):
    path = cache_dir() / f"{key}-v{exp_mod.CACHE_FORMAT}.jsonl"
    with open(path) as f:
        return {r["id"]: r for r in map(json.loads, f)}


def test_limits_are_derived_from_cpu_time_and_every_test_keeps_its_value(cache, executor):
    probs = [problem("burn", 2), problem("fast", 3)]
    out = attach_expected(probs, {"burn": BURN, "fast": FAST}, dataset_key="t1", executor=executor)
    assert [t.expected for t in out[0].tests] == [0, 1]
    assert [t.expected for t in out[1].tests] == [1, 2, 3]
    # 0.3 s of CPU per test -> about 1.2 s (CPU time does not stretch with the machine's load)
    assert 1.0 < out[0].time_limit_s < 1.2 * 1.5
    assert out[1].time_limit_s == MIN_TIME_LIMIT_S
    assert set(rows("t1")) == {"burn", "fast"}


def test_a_canonical_that_keeps_timing_out_is_an_error_and_is_not_cached(cache, executor, monkeypatch):
    monkeypatch.setattr(exp_mod, "CANONICAL_LIMIT_S", 0.1)  # below what BURN needs
    probs = [problem("burn", 3), problem("fast", 3)]
    with pytest.raises(InputError) as e:
        attach_expected(probs, {"burn": BURN, "fast": FAST}, dataset_key="t2", executor=executor)
    assert "burn" in str(e.value) and "timeout" in str(e.value)
    assert set(rows("t2")) == {"fast"}  # the good row is kept, the broken one never written


def test_a_failing_canonical_is_retried_alone_and_then_cached_whole(cache):
    # A real harness fault on the first run (its worker killed mid-row; the executor's own
    # retry is off so that this module's retry is what recovers), then a clean retry.
    with Executor(SandboxConfig(workers=1, harness_retries=0)) as ex:
        ex.pool.start()
        victim = ex.pool._slots[0].proc.popen.pid
        threading.Thread(target=lambda: (time.sleep(0.4), os.killpg(victim, signal.SIGKILL)),
                         daemon=True).start()
        out = attach_expected([problem("burn", 4)], {"burn": BURN}, dataset_key="t3", executor=ex)
        assert ex.stats["harness_errors"] == 1  # the first run did fail
    assert [t.expected for t in out[0].tests] == [0, 1, 4, 9]
    assert len(rows("t3")["burn"]["expected"]) == 4


def test_a_truncated_cached_row_is_recomputed_not_used(cache, executor):
    path = cache_dir() / f"t4-v{exp_mod.CACHE_FORMAT}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    # What a loaded box once wrote: 2 of 5 expected values.
    path.write_text(json.dumps({"id": "fast", "expected": [1, 2], "time_limit_s": 1.0}) + "\n")
    out = attach_expected([problem("fast", 5)], {"fast": FAST}, dataset_key="t4", executor=executor)
    assert [t.expected for t in out[0].tests] == [1, 2, 3, 4, 5]
    assert len(rows("t4")["fast"]["expected"]) == 5


def test_non_plain_outputs_are_an_error_not_a_dropped_test(cache, executor):
    code = "def f(x):\n    return object() if x == 2 else x\n"
    with pytest.raises(InputError, match="non-plain"):
        attach_expected([problem("obj", 4)], {"obj": code}, dataset_key="t5", executor=executor)
