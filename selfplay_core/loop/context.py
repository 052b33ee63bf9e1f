"""RunContext: the live objects of one run (model, engine, learner, executor, world, buffers,
state) built from a RunConfig, plus the small stateful helpers the stages share."""

from __future__ import annotations

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


def _learner_setup(cfg: RunConfig, policy):
    """The model to train and the Learner's keyword arguments, from the GPU plan: dtype,
    precision, gradient checkpointing and LoRA of the model, its Accelerator, how AdamW stores
    bf16 updates, and whether each step releases the CUDA cache for a colocated vLLM server."""
    from selfplay_core.rl.gpu import low_precision_rounding, make_accelerator, prepare_for

    if cfg.gpu is None:
        return policy, {"low_precision": low_precision_rounding(None)}
    colocated = cfg.engine.backend == "vllm" and cfg.gpu.vllm_placement == "colocated"
    return prepare_for(policy, cfg.gpu), {"accelerator": make_accelerator(cfg.gpu),
                                          "low_precision": low_precision_rounding(cfg.gpu),
                                          "release_cuda_cache": colocated}


class RunContext:
    def __init__(self, cfg: RunConfig, run_dir: str | Path, state: RunState | None = None,
                 executor=None, model_dir: str | Path | None = None):
        import torch
        from transformers import AutoModelForCausalLM

        from selfplay_core.loop import engine_setup as E
        from selfplay_core.rl.learner import Learner
        from selfplay_core.sandbox import Executor

        from selfplay_core.engines.gpu_config import refuse_distributed_launch

        refuse_distributed_launch()  # one process runs the loop; every rank would otherwise
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
        self._vllm = None
        if cfg.engine.backend == "vllm":
            if not E.launches_server(cfg):
                E.check_server(cfg)  # before the model loads: a missing server fails at once
            from transformers import AutoTokenizer
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        else:
            self.engine = E.make_hf_engine(cfg, self.model_dir)
            self.tokenizer = self.engine.tokenizer
        policy = AutoModelForCausalLM.from_pretrained(str(self.model_dir), dtype=dtype)
        policy, setup = _learner_setup(cfg, policy)
        self.learner = Learner(policy, cfg.learner, pad_token_id=E.pad_id_of(self.tokenizer), **setup)
        trainer_state = self.model_dir / "trainer_state.pt"
        if self.state.last_checkpoint and trainer_state.exists():
            saved = torch.load(trainer_state, weights_only=False)
            self.learner.load_state_dict(saved)
            restore_rng_states(saved.get("rng"))
        if cfg.engine.backend == "vllm":
            self._vllm = E.VLLMSetup(cfg, self.learner.unwrapped, self.tokenizer, self.run_dir,
                                     self.model_dir, resume=bool(self.state.last_checkpoint))
            self.engine = self._vllm.engine
        self.executor = executor or Executor(cfg.sandbox)
        self._own_executor = executor is None
        try:
            self._load_world()
        except BaseException:
            self.close()
            raise
        from selfplay_core.loop.overlap import BackgroundUpdate
        self.background = BackgroundUpdate(self)  # overlap_generation
        self.buffers = TaskBuffer.from_json(self.state.buffer, threshold=cfg.teacher.similarity_threshold)
        self.contamination = TaskBuffer(threshold=cfg.teacher.similarity_threshold)
        for p in self.eval_problems:
            from selfplay_core.buffers import BufferItem
            self.contamination.add(BufferItem(p.id, "eval", p.prompt or "", p.metadata.get("reference", "")))

    # ---- world ------------------------------------------------------------------------------
    def _load_world(self) -> None:
        """Eval problems, real training tasks and goalposts from the configured world
        (loop/worlds.py); goalposts are mined for the starting model, or kept on resume."""
        from selfplay_core.loop.worlds import build_world, select_goalposts

        cfg = self.config
        fits = None
        if cfg.world.name != "toy":
            from selfplay_core.loop.engine_setup import context_length, prompt_fits
            fits = prompt_fits(cfg, self.tokenizer, context_length(cfg, self.engine, self.model_dir))
        self.world = build_world(cfg, executor=self.executor, fits=fits)
        self.fidelity_fn = self.world.fidelity_fn
        self.decontaminator = self.world.decontaminator
        self.eval_problems: list[Problem] = self.world.eval_problems
        self.real_tasks: list[Problem] = self.world.real_tasks
        self.goalposts = select_goalposts(self.world, cfg, engine=self.engine, executor=self.executor,
                                          model_dir=self.model_dir, known_ids=self.state.goalpost_ids,
                                          run_dir=self.run_dir)
        self.state.goalpost_ids = [g.id for g in self.goalposts]

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

    def push_weights(self) -> dict:
        """After a learner update: the engine gets the new weights (copied in place for hf,
        pushed to the server for vllm). Returns metrics of the push."""
        model = self.learner.unwrapped
        if self._vllm is not None:
            return self._vllm.push(model, self.tokenizer)
        from selfplay_core.engines.weight_sync import is_peft, iter_sync_tensors

        if is_peft(model):  # merged tensors under the base names, made one at a time
            self.engine.load_weights(iter_sync_tensors(model))
        else:
            self.engine.load_weights(model.state_dict())
        return {}

    def learner_turn(self):
        """Context for the learner's update (a colocated vLLM server sleeps through it; the
        following `push_weights` wakes it)."""
        from contextlib import nullcontext

        return self._vllm.learner_turn() if self._vllm is not None else nullcontext()

    def close(self) -> None:
        bg = getattr(self, "background", None)
        if bg is not None and bg.running:  # never leave a learner thread behind a failed run
            try:
                bg.join_and_push()
            except Exception as e:  # noqa: BLE001 - the run is failing already; say why, go on
                log.warning("background learner update ended with %s: %s", type(e).__name__, e)
        if getattr(self, "_own_executor", False):
            self.executor.close()
            self._own_executor = False
        if getattr(self, "_vllm", None) is not None:
            self._vllm.close()
            self._vllm = None
