from __future__ import annotations

import os
from typing import Literal

from pydantic import Field

from selfplay_core.frozen import FrozenConfig


class SandboxConfig(FrozenConfig):
    """Executor settings. Frozen; unknown keys are an error."""

    # local: forked workers in namespaces on this machine; docker: the same workers inside a
    # container.
    backend: Literal["local", "docker"] = "local"
    # Programs run at once (default: one per CPU).
    workers: int = Field(default_factory=lambda: max(1, os.cpu_count() or 1), ge=1, le=510)
    # auto: bubblewrap when it works, else none (with a loud warning).
    isolation: Literal["auto", "bwrap", "none"] = "auto"
    # Refuse to start rather than run untrusted code without namespaces.
    require_isolation: bool = False
    # Children run as uid_base + worker index (when the worker may switch uid), so each
    # worker's jobs have their own RLIMIT_NPROC budget and can be swept as a group. Default:
    # a random block of 512 uids reserved with a lock file, so two executors on one machine
    # (a run and an evaluation, say) never share uids.
    uid_base: int | None = Field(default=None, ge=1000)
    memory_limit_mb: int | None = Field(default=None, ge=64,
                                        description="override every problem's memory limit")
    # A program printing more than this fails (output limit exceeded).
    output_limit_mb: int = Field(default=16, ge=1)
    # Size of each worker's /tmp (scratch dirs and stdin files live in memory): a job's files
    # count against this bound on top of its address-space limit.
    scratch_mb: int = Field(default=256, ge=32)
    # A harness error (the sandbox's own fault) is retried this many times before it is
    # reported; callers exclude what remains from pass rates.
    harness_retries: int = Field(default=1, ge=0, le=5)
    # The self-play loop excludes what stays a harness error from pass rates and rollouts
    # and fails the run when an iteration has more than this share of them (and at least 3).
    max_harness_error_share: float = Field(default=0.05, ge=0.0, le=1.0)
    # A memory cgroup per worker, limited to the running job's memory limit (+ scratch + the
    # worker's share): bounds a job's memory by every route, forked processes included.
    # auto: where this machine lets us create one; required: refuse to start without.
    memory_cgroup: Literal["auto", "off", "required"] = "auto"
    # Self-play gate: a reference runs in gate_bits + 1 fresh processes (distinct hash seeds and
    # address layouts), so output that depends on one random bit of the process passes with
    # probability at most 2**-gate_bits.
    gate_bits: int = Field(default=6, ge=1, le=12)
    # Hard cap on one sample's total wall time, whatever its per-test limits add up to.
    max_sample_time_s: float = Field(default=60.0, gt=0)
    # docker backend: the executor image (make executor-image builds it).
    docker_image: str = "selfplay-executor:latest"
    # docker backend: the container's memory limit.
    docker_memory_mb: int = Field(default=2048, ge=128)
    # docker backend: the container's process limit.
    docker_pids_limit: int = Field(default=64, ge=8)
    # Comparison tolerances for stdout tests.
    stdout_abs_tol: float = 1e-6
    # (absolute, then relative to the expected number: a float matches within either.)
    stdout_rel_tol: float = 1e-6
