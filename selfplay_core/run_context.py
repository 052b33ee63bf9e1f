"""RunContext: the live objects of one run that the stages and methods share (config, state,
RNG, engine, executor, learner, the world's problems, buffers), plus the small stateful helpers
they use (seeds, ids, anchors, the real-task cursor).

It is a plain dataclass: `loop.context.build_context` assembles a run's context from its
config with one small factory per part; a test constructs one from exactly the parts it needs
(`RunContext(config=cfg, executor=executor)`), and what it leaves out stays None.
"""

from __future__ import annotations

import logging
import random
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from selfplay_core.buffers import BufferItem, TaskBuffer
from selfplay_core.goalpost_view import goalpost_anchors, privileged
from selfplay_core.overlap import BackgroundUpdate
from selfplay_core.problems import Problem
from selfplay_core.records import Anchor
from selfplay_core.state import RunState, restore_rng

log = logging.getLogger(__name__)

IDENTITY_SEED = Anchor("azr-seed", "Return the input unchanged.", "def f(x):\n    return x\n")


def contamination_index(problems: list[Problem], threshold: float) -> TaskBuffer:
    """The evaluation problems as a near-duplicate index: a proposal too close to one is rejected."""
    index = TaskBuffer(threshold=threshold)
    for p in problems:
        index.add(BufferItem(p.id, "eval", p.prompt or "", p.metadata.get("reference", "")))
    return index


@dataclass
class RunContext:
    config: Any                                  # the RunConfig (selfplay_core.config)
    run_dir: Path | None = None
    state: RunState = field(default_factory=RunState)
    rng: random.Random | None = None             # None: seeded from config.seed (and the state)
    engine: Any = None                           # generation (engines.base.Engine)
    # A separate teacher that is not the policy (teacher.model): it writes every proposal and never
    # receives the policy's weights. None: the policy proposes (`proposer` is `engine`).
    teacher_engine: Any = None
    # A separate teacher that trains (teacher.train): its own learner, which takes the teacher's
    # rollouts, and the push of its weights to teacher_engine. None: frozen, or no separate teacher.
    teacher_learner: Any = None
    teacher_push: Callable[[Any], dict] | None = None
    executor: Any = None                         # the sandbox (sandbox.Executor)
    learner: Any = None                          # rl.learner.Learner
    tokenizer: Any = None
    model_dir: Path | None = None                # the weights this process started from (a checkpoint on resume)
    # The configured start weights, also on resume: what a frozen copy of the initial policy
    # loads (SGS's Guide). None: model_dir.
    start_model_dir: Path | None = None
    world: Any = None                            # worlds.World (where the problems below came from)
    eval_problems: list[Problem] = field(default_factory=list)
    real_tasks: list[Problem] = field(default_factory=list)
    goalposts: list[Problem] = field(default_factory=list)
    # The world's oracle (worlds.base: fidelity, variant, truth, guide_judgment), the single entry
    # point of the diagnostics that need the ground truth; None for real data. Never a reward.
    oracle: Any = None
    decontaminator: Any = None                   # real-data worlds: n-gram index of the eval statements
    buffers: TaskBuffer | None = None            # None: the state's buffer
    contamination: TaskBuffer | None = None      # None: built from eval_problems
    # After a learner update: hands the new weights to the engine, returns metrics of the push.
    # None: nothing to push (the engine is not updated, e.g. a test without a learner).
    push: Callable[[Any], dict] | None = None
    # Around the learner's update (a colocated vLLM server sleeps through it); None: nothing.
    turn: Callable[[], AbstractContextManager] | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)   # run by close(), last first
    # overlap_generation: the learner update in flight (None: made here, idle until started)
    background: BackgroundUpdate | None = None

    def __post_init__(self):
        if self.run_dir is not None:
            self.run_dir = Path(self.run_dir)
        if self.rng is None:
            self.rng = random.Random(f"selfplay:{self.config.seed}")
            restore_rng(self.rng, self.state)
        threshold = self.config.teacher.similarity_threshold
        if self.buffers is None:
            self.buffers = TaskBuffer.from_json(self.state.buffer, threshold=threshold)
        if self.contamination is None:
            self.contamination = contamination_index(self.eval_problems, threshold)
        if self.background is None:
            self.background = BackgroundUpdate(self)

    @property
    def proposer(self):
        """The engine that writes proposals: the frozen teacher's, else the policy's."""
        return self.teacher_engine if self.teacher_engine is not None else self.engine

    @property
    def proposer_tokenizer(self):
        """The tokenizer that counts the proposer's tokens: a frozen teacher's own, else the
        run's, else the policy engine's (None: nothing to count with)."""
        return getattr(self.teacher_engine, "tokenizer", None) or self.tokenizer \
            or getattr(self.engine, "tokenizer", None)

    # ---- helpers the stages share ------------------------------------------------------------
    def next_seed(self) -> int:
        self.state.seed_counter += 1
        return self.config.seed * 1_000_003 + self.state.seed_counter

    def next_id(self) -> int:
        self.state.id_counter += 1
        return self.state.id_counter

    def goalposts_by_id(self) -> dict[str, Problem]:
        """Every goalpost a proposal can descend from, by id: the world's pool (dynamic goalposts
        promote from it) and the run's set."""
        pool = list(getattr(self.world, "goalpost_pool", None) or [])
        return {g.id: g for g in pool + list(self.goalposts)}

    def goalpost_anchors(self, k: int, goalposts: list[Problem] | None = None) -> list[Anchor]:
        """k goalposts drawn at random (from `goalposts`, else the run's set), as a method may
        see them: question only, unless the run is the privileged sighted ablation."""
        pool = self.goalposts if goalposts is None else goalposts
        gps = self.rng.sample(pool, min(k, len(pool)))
        return goalpost_anchors(gps, privileged(self.config.method))

    def buffer_anchors(self, k: int, kinds: tuple[str, ...] | None = None) -> list[Anchor]:
        items = [b for b in self.buffers if kinds is None or b.kind in kinds]
        if not items:
            return [IDENTITY_SEED] * k
        return [Anchor(b.id, b.question, b.code, b.goalpost_id, b.axis)
                for b in (self.rng.choice(items) for _ in range(k))]

    def next_real_tasks(self, k: int) -> list[Problem]:
        if not self.real_tasks:
            return []
        out = []
        for _ in range(k):
            out.append(self.real_tasks[self.state.real_cursor % len(self.real_tasks)])
            self.state.real_cursor += 1
        return out

    def snapshot_state(self) -> RunState:
        self.state.buffer = self.buffers.to_json()
        self.state.rng_state = self.rng.getstate()
        return self.state

    def learner_turn(self) -> AbstractContextManager:
        """Context for the learner's update (a colocated vLLM server sleeps through it)."""
        return self.turn() if self.turn is not None else nullcontext()

    def push_weights(self) -> dict:
        """After a learner update: the engine gets the new weights."""
        return self.push(self.learner.unwrapped) if self.push is not None else {}

    def push_teacher_weights(self) -> dict:
        """After the separate teacher's update: its engine gets the new weights."""
        return self.teacher_push(self.teacher_learner.unwrapped) if self.teacher_push else {}

    def close(self) -> None:
        if self.background.running:  # never leave a learner thread behind a failed run
            try:
                self.background.join_and_push()
            except Exception as e:  # noqa: BLE001 - the run is failing already; say why, go on
                log.warning("background learner update ended with %s: %s", type(e).__name__, e)
        while self.closers:
            self.closers.pop()()
