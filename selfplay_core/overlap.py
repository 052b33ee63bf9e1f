"""Overlapping generation and training (`overlap_generation: true`): iteration t's learner update
runs in a background thread while iteration t+1's stages generate and verify.

Schedule (U_t = the update on iteration t's rollouts R_t, theta_t = the weights after t - 1
updates):

    iteration t:  start U_{t-1} in the background  |  G_t: generation and verification on the
                  engine's weights theta_{t-1}       |  update stage: wait for U_{t-1}, push
                  theta_t to the engine, compute R_t's advantages and keep them for U_t
                  -> evaluation, goalposts and the checkpoint see theta_t

so R_t is sampled one update behind the weights it trains (one step off-policy, as in prime-rl
and TRL's async GRPO); the PPO ratio against the engine's logprobs corrects it (and TIS, with
learner.tis_cap), and the first epoch's `mismatch/*` metrics measure it. The last iteration
updates in line, so a run ends with all its updates applied. The pending rollouts are part of the
run state (`RunState.pending_update`), so a resume starts the same background update the
uninterrupted run would have.

The learner's metrics logged at iteration t are U_{t-1}'s; `time/update_wait_s` is how long the
update stage waited for it (the part of the learner's time the overlap did not hide) and
`time/learner_s` the learner's own time.
"""

from __future__ import annotations

import dataclasses
import threading
import time

from selfplay_core.rl.rollout import Rollout


def to_rows(rollouts: list[Rollout]) -> list[dict]:
    return [dataclasses.asdict(r) for r in rollouts]


def from_rows(rows: list[dict]) -> list[Rollout]:
    return [Rollout(**r) for r in rows]


class BackgroundUpdate:
    """At most one learner update in flight."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._thread: threading.Thread | None = None
        self._box: dict = {}

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start_pending(self) -> None:
        """Start the update the state holds (iteration t - 1's rollouts), if any."""
        st = self.ctx.state
        if self._thread is not None or not st.pending_update:
            return
        rollouts, epochs = from_rows(st.pending_update), self.ctx.config.updates_per_iteration
        st.pending_update = []
        box = self._box = {}

        def work():
            t0 = time.perf_counter()
            try:
                box["metrics"] = self.ctx.learner.update(rollouts, epochs=epochs)
            except BaseException as e:  # noqa: BLE001 - re-raised by join()
                box["error"] = e
            box["seconds"] = time.perf_counter() - t0

        self._thread = threading.Thread(target=work, name="learner-update", daemon=True)
        self._thread.start()

    def join_and_push(self) -> dict:
        """Wait for the update in flight, then hand its weights to the engine; returns its
        metrics with the push's and the timings ({} when none was in flight)."""
        if self._thread is None:
            return {}
        t0 = time.perf_counter()
        self._thread.join()
        waited = time.perf_counter() - t0
        self._thread = None
        box = self._box
        if "error" in box:
            raise box["error"]
        metrics = dict(box["metrics"])
        metrics.update(self.ctx.push_weights())
        metrics["time/update_wait_s"] = waited
        metrics["time/learner_s"] = box["seconds"]
        return metrics

    def defer(self, rollouts: list[Rollout]) -> None:
        """Keep rollouts for the next iteration's background update (saved with the state)."""
        self.ctx.state.pending_update = to_rows(rollouts)
