"""RunContext: the live objects of one run (model, engine, learner, executor, world, buffers,
state) built from a RunConfig, plus the small stateful helpers the stages share."""

from __future__ import annotations

import hashlib
import json
import logging
import random
from pathlib import Path

from selfplay_core.buffers import TaskBuffer
from selfplay_core.config import RunConfig
from selfplay_core.loop.checkpoints import (
    Checkpoint, resolve_checkpoint, restore_rng_states, rng_states, write_checkpoint,
)
from selfplay_core.loop.records import Anchor
from selfplay_core.problems import Problem
from selfplay_core.state import RunState, restore_rng

log = logging.getLogger(__name__)

IDENTITY_SEED = Anchor("azr-seed", "Return the input unchanged.", "def f(x):\n    return x\n")


def resolve_model_dir(cfg: RunConfig) -> Path:
    if cfg.model.path == "toy":
        from selfplay_core.toyworld.bootstrap import default_model_dir
        try:
            return default_model_dir()
        except FileNotFoundError:
            from selfplay_core.toyworld.bootstrap import bootstrap_toy_model
            log.warning("no toy model yet: bootstrapping one (a few minutes, cached afterwards)")
            return Path(bootstrap_toy_model())
    return Path(cfg.model.path)


class RunContext:
    def __init__(self, cfg: RunConfig, run_dir: str | Path, state: RunState | None = None,
                 executor=None, model_dir: str | Path | None = None):
        import torch
        from transformers import AutoModelForCausalLM

        from selfplay_core.engines.hf import HFEngine
        from selfplay_core.rl.learner import Learner
        from selfplay_core.sandbox import Executor

        self.config = cfg
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.state = state or RunState()
        self.rng = random.Random(f"selfplay:{cfg.seed}")
        restore_rng(self.rng, self.state)
        if cfg.model.torch_threads:
            torch.set_num_threads(cfg.model.torch_threads)
        # A fresh run seeds torch here; a resume then restores the generator states saved with
        # its checkpoint (below), so both continue with the same random stream.
        torch.manual_seed(cfg.seed)
        self.model_dir = Path(model_dir) if model_dir else (
            self._resume_checkpoint() if self.state.last_checkpoint else resolve_model_dir(cfg))
        dtype = getattr(torch, cfg.model.dtype)
        self.engine = HFEngine(str(self.model_dir), batch_size=cfg.engine.batch_size, dtype=dtype)
        self.tokenizer = self.engine.tokenizer
        policy = AutoModelForCausalLM.from_pretrained(str(self.model_dir), dtype=dtype)
        self.learner = Learner(policy, cfg.learner, pad_token_id=self.engine.pad_id)
        trainer_state = self.model_dir / "trainer_state.pt"
        if self.state.last_checkpoint and trainer_state.exists():
            saved = torch.load(trainer_state, weights_only=False)
            self.learner.load_state_dict(saved)
            restore_rng_states(saved.get("rng"))
        self.executor = executor or Executor(cfg.sandbox)
        self._own_executor = executor is None
        self._load_world()
        self.buffers = TaskBuffer.from_json(self.state.buffer, threshold=cfg.teacher.similarity_threshold)
        self.contamination = TaskBuffer(threshold=cfg.teacher.similarity_threshold)
        for p in self.eval_problems:
            from selfplay_core.buffers import BufferItem
            self.contamination.add(BufferItem(p.id, "eval", p.prompt or "", p.metadata.get("reference", "")))

    # ---- world ------------------------------------------------------------------------------
    def _load_world(self) -> None:
        cfg = self.config
        if cfg.world.name != "toy":
            raise NotImplementedError("world 'lcb' runs on GPU deployments; the CPU default is 'toy'")
        from selfplay_core.toyworld.fidelity import proposal_fidelity
        from selfplay_core.toyworld.splits import build_world

        self.world = build_world(cfg.world.seed)
        self.fidelity_fn = proposal_fidelity
        ev = self.world.eval.problems
        if cfg.eval.max_problems:
            r = random.Random(f"eval-subset:{cfg.world.seed}")
            ev = sorted(r.sample(ev, min(cfg.eval.max_problems, len(ev))), key=lambda p: p.id)
        self.eval_problems: list[Problem] = ev
        self.real_tasks: list[Problem] = list(self.world.train.problems)
        random.Random(f"real-order:{cfg.seed}").shuffle(self.real_tasks)
        self.goalposts = self._goalposts()
        self.state.goalpost_ids = [g.id for g in self.goalposts]

    def _goalposts(self) -> list[Problem]:
        """Mined, not decreed: pool tasks with pass@k = 0 for the starting model (cached)."""
        cfg = self.config
        pool = {p.id: p for p in self.world.goalpost_pool.problems}
        if self.state.goalpost_ids:
            return [pool[i] for i in self.state.goalpost_ids]
        from selfplay_core.toyworld.bootstrap import cache_root
        weights = sorted(self.model_dir.glob("*.safetensors"))
        h = hashlib.sha256()
        for w in weights:
            h.update(w.read_bytes())
        key = f"{h.hexdigest()[:16]}-w{cfg.world.seed}-k{cfg.world.goalpost_k}"
        cache = cache_root() / "goalposts" / f"{key}.json"
        if cache.exists():
            ids = json.loads(cache.read_text())["ids"]
        else:
            from selfplay_core.engines.base import SamplingParams
            from selfplay_core.goalposts import engine_solver, mine_goalposts
            sp = SamplingParams(temperature=cfg.engine.temperature, top_p=cfg.engine.top_p,
                                max_new_tokens=cfg.engine.max_new_tokens_student, seed=cfg.world.seed)
            res = mine_goalposts(list(pool.values()), [engine_solver(self.engine, self.executor, sp)],
                                 k=cfg.world.goalpost_k, chunk=16)
            ids = [g.id for g in res.goalposts]
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps({**res.summary(), "ids": ids}))
        gps = [pool[i] for i in ids]
        if cfg.world.max_goalposts:
            gps = sorted(random.Random(f"gp-subset:{cfg.seed}").sample(gps, min(cfg.world.max_goalposts, len(gps))),
                         key=lambda p: p.id)
        return gps

    # ---- helpers the stages share ------------------------------------------------------------
    def next_seed(self) -> int:
        self.state.seed_counter += 1
        return self.config.seed * 1_000_003 + self.state.seed_counter

    def next_id(self) -> int:
        self.state.id_counter += 1
        return self.state.id_counter

    def goalpost_anchors(self, k: int) -> list[Anchor]:
        gps = self.rng.sample(self.goalposts, min(k, len(self.goalposts)))
        return [Anchor(g.id, g.prompt or "", g.metadata.get("reference", ""), goalpost_id=g.id) for g in gps]

    def buffer_anchors(self, k: int, kinds: tuple[str, ...] | None = None) -> list[Anchor]:
        items = [b for b in self.buffers if kinds is None or b.kind in kinds]
        if not items:
            return [IDENTITY_SEED] * k
        return [Anchor(b.id, b.question, b.code, b.goalpost_id, b.axis)
                for b in (self.rng.choice(items) for _ in range(k))]

    def next_real_tasks(self, k: int) -> list[Problem]:
        out = []
        for _ in range(k):
            out.append(self.real_tasks[self.state.real_cursor % len(self.real_tasks)])
            self.state.real_cursor += 1
        return out

    def snapshot_state(self) -> RunState:
        self.state.buffer = self.buffers.to_json()
        self.state.rng_state = self.rng.getstate()
        return self.state

    # ---- checkpoints ----------------------------------------------------------------------------
    def save_checkpoint(self, iteration: int) -> Checkpoint:
        """checkpoints/iter-NNNN, written atomically with a manifest (loop.checkpoints)."""
        import torch

        def save(path: Path) -> None:
            self.learner.unwrapped.save_pretrained(path)
            self.tokenizer.save_pretrained(path)
            torch.save({**self.learner.state_dict(), "rng": rng_states()}, path / "trainer_state.pt")

        return write_checkpoint(self.run_dir, iteration, save)

    def _resume_checkpoint(self) -> Path:
        """The state's checkpoint, verified (fetched from the checkpoint store if the local copy is
        gone or damaged); StateError naming the file and the last good iteration otherwise."""
        return resolve_checkpoint(self.run_dir, self.state, self.config)

    def close(self) -> None:
        if self._own_executor:
            self.executor.close()
