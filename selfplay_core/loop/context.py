"""A run's RunContext (`run_context.RunContext`) built from its config, one small factory per
part: the starting weights, the policy and learner, the engine, the executor, the world and its
goalposts, the weight push. `build_context` wires them in the order a resume needs (the RNG
states of a checkpoint are restored after the model loads, the goalposts of a saved run are
kept); each factory can also be called on its own.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from selfplay_core.config_errors import ConfigError
from selfplay_core.checkpoints import (Checkpoint, StateError, resolve_checkpoint, restore_rng_states,
                                       rng_states, write_checkpoint)
from selfplay_core.engines.weight_sync import is_peft, iter_sync_tensors
from selfplay_core.loop import engine_setup as E
from selfplay_core.loop.worlds import World, build_world, select_goalposts
from selfplay_core.engines.gpu_config import DistributedLaunchError, refuse_distributed_launch
from selfplay_core.rl.gpu import low_precision_rounding, make_accelerator, prepare_for
from selfplay_core.rl.learner import Learner
from selfplay_core.run_context import RunContext
from selfplay_core.sandbox import Executor
from selfplay_core.state import RunState
from selfplay_core.worlds import registered as registered_worlds

log = logging.getLogger(__name__)


def resolve_model_dir(cfg) -> Path:
    """model.path: a world's name (`toy`) means that world's default model (built if it can
    be and is not there yet); anything else is a folder or hub id."""
    world = registered_worlds().get(cfg.model.path)
    if world is not None:
        return Path(world.default_model(build=True))
    return Path(cfg.model.path)


def starting_weights(cfg, run_dir: Path, state: RunState) -> Path:
    """The state's checkpoint, verified (fetched from the checkpoint store if the local copy is
    gone or damaged; StateError naming the file and the last good iteration otherwise), or the
    configured model for a fresh run."""
    if state.last_checkpoint:
        return resolve_checkpoint(run_dir, state, cfg)
    return resolve_model_dir(cfg)


def _learner_setup(cfg, policy):
    """The model to train and the Learner's keyword arguments, from the GPU plan: dtype,
    precision, gradient checkpointing and LoRA of the model, its Accelerator, how AdamW stores
    bf16 updates, and whether each step releases the CUDA cache for a colocated vLLM server."""
    if cfg.gpu is None:
        return policy, {"low_precision": low_precision_rounding(None)}
    colocated = cfg.engine.backend == "vllm" and cfg.gpu.vllm_placement == "colocated"
    return prepare_for(policy, cfg.gpu), {"accelerator": make_accelerator(cfg.gpu),
                                          "low_precision": low_precision_rounding(cfg.gpu),
                                          "release_cuda_cache": colocated}


def learner_group(cfg):
    """This process's rl.distributed.LearnerGroup when the run is launched as several ranks with
    gpu.distributed set (joined here, once per process); None for one process."""
    if cfg.gpu is None or cfg.gpu.distributed == "none":
        return None
    from selfplay_core.rl import distributed

    return distributed.join(cfg.gpu.device)


TEACHER_DIR = "teacher"   # a checkpoint's subfolder holding a separate teacher that trains


def teacher_weights(cfg, model_dir: Path | None = None, resume: bool = False) -> Path:
    """Where a separate teacher's weights load from: on the resume of a run whose teacher trains,
    the checkpoint's `teacher/` folder (StateError if it has none); else `teacher.model`."""
    if resume and cfg.teacher.train and model_dir is not None:
        saved = Path(model_dir) / TEACHER_DIR
        if not (saved / "config.json").is_file():
            raise StateError(f"{saved}: the checkpoint has no trained teacher, but teacher.train "
                             "is true: resume with the config the run was started with")
        return saved
    return Path(cfg.teacher.model).expanduser()


def make_teacher_engine(cfg, weights: Path | None = None):
    """The separate teacher of `teacher.model` (None without one): an in-process hf engine on its
    weights (`weights`: a checkpoint's trained teacher instead), or on a vLLM run the server of
    `teacher.vllm_url` (always frozen). Only a teacher that trains (teacher.train) receives
    weight pushes, from its own learner. A folder that is not a model is an error before
    anything loads."""
    t = cfg.teacher
    if not t.model:
        return None
    if t.vllm_url:
        from selfplay_core.engines.errors import EngineError
        from selfplay_core.engines.vllm import VLLMEngine, VLLMEngineConfig

        engine = VLLMEngine(VLLMEngineConfig(base_url=t.vllm_url))
        try:
            engine.check_health()
        except EngineError as e:  # before the world and goalposts load, not at the first lemma
            raise E.EngineSetupError(f"teacher.vllm_url {t.vllm_url} does not answer ({e}); serve "
                                     f"{t.model} there (`selfplay vllm-serve {t.model} --port "
                                     "PORT`) or drop teacher.vllm_url") from None
        return engine
    path = Path(weights) if weights else Path(t.model).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(f"teacher.model {t.model}: not a model folder (no config.json); give the "
                          "folder a checkpoint or `save_pretrained` wrote")
    log.info("teacher: a separate model, %s (%s)", path,
             "trained by its own learner" if t.train else "frozen; the learner trains the student only")
    return E.make_hf_engine(cfg, path)


def make_teacher_learner(cfg, engine, weights: Path, resume: bool):
    """The learner of a separate teacher that trains (None otherwise): its own copy of the
    teacher's weights and optimizer, anchored (with a KL anchor) to `teacher.model`, the
    teacher's start; on resume its optimizer state from the checkpoint's `teacher/` folder."""
    t = cfg.teacher
    if not (t.model and t.train) or engine is None:
        return None
    learner, _ = _learner_from(cfg, Path(weights), Path(t.model).expanduser(), engine.tokenizer, resume)
    return learner


def make_learner(cfg, model_dir: Path, tokenizer, resume: bool, group=None):
    """The policy (with the GPU plan's precision, gradient checkpointing and LoRA) and its
    learner; on resume the optimizer state and the torch RNG states of the checkpoint. `group`
    (rl.distributed.LearnerGroup): this rank's place in a multi-process learner."""
    learner, saved = _learner_from(cfg, Path(model_dir), resolve_model_dir(cfg), tokenizer, resume,
                                   group=group)
    if saved is not None:
        restore_rng_states(saved.get("rng"))
    return learner


def _learner_from(cfg, weights: Path, start: Path, tokenizer, resume: bool, group=None):
    """A learner on the weights in `weights` (with the GPU plan's setup), KL-anchored to `start`
    (the configured starting weights, also on resume), and on resume the optimizer state saved
    beside the weights; returns it with that saved state (None: fresh)."""
    dtype = getattr(torch, cfg.model.dtype)
    model, setup = _learner_setup(cfg, AutoModelForCausalLM.from_pretrained(str(weights), dtype=dtype))
    ref = None
    if cfg.learner.needs_reference:
        ref = AutoModelForCausalLM.from_pretrained(str(start), dtype=dtype)
    learner = Learner(model, cfg.learner, pad_token_id=E.pad_id_of(tokenizer), ref_model=ref,
                      group=group, **setup)
    path = weights / "trainer_state.pt"
    if not (resume and path.exists()):
        return learner, None
    saved = torch.load(path, weights_only=False)
    learner.load_state_dict(saved)
    return learner, saved


def hf_push(engine):
    """Weight push for the in-process hf engine: copy the learner's tensors in place (a LoRA
    learner's merged tensors, under the base model's names)."""
    def push(model) -> dict:
        if is_peft(model):  # merged tensors under the base names, made one at a time
            engine.load_weights(iter_sync_tensors(model))
        else:
            engine.load_weights(model.state_dict())
        return {}
    return push


def make_world(cfg, executor, tokenizer, engine, model_dir: Path) -> World:
    """Eval problems, real training tasks and the goalpost pool of the configured world
    (loop/worlds.py); a real-data world leaves out what does not fit the model's context."""
    fits = None
    if registered_worlds()[cfg.world.name].needs_fits:
        fits = E.prompt_fits(cfg, tokenizer, E.context_length(cfg, engine, model_dir))
    return build_world(cfg, executor=executor, fits=fits)


def real_tasks(cfg, world: World, goalposts) -> list:
    """The world's real training tasks, plus the goalposts they lack (world.goalposts_in_real_tasks:
    RLVR trains on the split the goalposts come from), in a seeded order."""
    tasks = list(world.real_tasks)
    have = {p.id for p in tasks}
    extra = [g for g in goalposts if g.id not in have]
    if not (cfg.world.goalposts_in_real_tasks and extra):
        return tasks
    tasks += extra
    random.Random(f"real-order+goalposts:{cfg.seed}").shuffle(tasks)
    return tasks


def build_context(cfg, run_dir: str | Path, state: RunState | None = None, executor=None,
                  model_dir: str | Path | None = None) -> RunContext:
    """Everything a run needs, from its config: a fresh run, or (with a state that has a
    checkpoint) the continuation of one. `executor`: use this one (the caller closes it)."""
    # one process runs the loop; under a launcher only rank 0 of a configured learner group
    refuse_distributed_launch(gpu=cfg.gpu)
    group = learner_group(cfg)
    if group is not None and not group.is_leader:
        raise DistributedLaunchError(f"rank {group.rank} builds no run: only rank 0 runs the loop "
                                     "(the others follow it: selfplay_core.loop.follower)")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    state = state or RunState()
    if cfg.model.torch_threads:
        torch.set_num_threads(cfg.model.torch_threads)
    # A fresh run seeds torch here; a resume then restores the generator states saved with its
    # checkpoint (make_learner), so both continue with the same random stream.
    torch.manual_seed(cfg.seed)
    model_dir = Path(model_dir) if model_dir else starting_weights(cfg, run_dir, state)
    resume = bool(state.last_checkpoint)
    closers: list = []
    turn = None
    try:
        engine = None
        if cfg.engine.backend == "vllm":
            if not E.launches_server(cfg):
                E.check_server(cfg)  # before the model loads: a missing server fails at once
            tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        else:
            engine = E.make_hf_engine(cfg, model_dir)
            tokenizer = engine.tokenizer
        if group is not None:  # the followers build their replicas beside ours
            group.send("start", str(model_dir), resume)
        learner = make_learner(cfg, model_dir, tokenizer, resume, group=group)
        if cfg.engine.backend == "vllm":
            vllm = E.VLLMSetup(cfg, learner.unwrapped, tokenizer, run_dir, model_dir, resume=resume)
            closers.append(vllm.close)
            engine = vllm.engine
            push = lambda model: vllm.push(model, tokenizer)  # noqa: E731
            turn = vllm.learner_turn
        else:
            push = hf_push(engine)
        t_weights = teacher_weights(cfg, model_dir, resume) if cfg.teacher.model else None
        teacher_engine = make_teacher_engine(cfg, t_weights)
        teacher_learner = make_teacher_learner(cfg, teacher_engine, t_weights, resume)
        if executor is None:
            executor = Executor(cfg.sandbox)
            closers.append(executor.close)
        world = make_world(cfg, executor, tokenizer, engine, model_dir)
        goalposts = select_goalposts(world, cfg, engine=engine, executor=executor,
                                     model_dir=model_dir, known_ids=state.goalpost_ids, run_dir=run_dir)
    except BaseException:
        for close in reversed(closers):
            close()
        raise
    state.goalpost_ids = [g.id for g in goalposts]
    start = resolve_model_dir(cfg) if resume else model_dir
    return RunContext(cfg, run_dir, state, engine=engine, teacher_engine=teacher_engine,
                      teacher_learner=teacher_learner,
                      teacher_push=hf_push(teacher_engine) if teacher_learner else None,
                      executor=executor, learner=learner,
                      tokenizer=tokenizer, model_dir=model_dir, start_model_dir=start, world=world,
                      eval_problems=world.eval_problems, real_tasks=real_tasks(cfg, world, goalposts),
                      goalposts=goalposts, oracle=world.oracle,
                      decontaminator=world.decontaminator, push=push, turn=turn, closers=closers)


def save_checkpoint(ctx: RunContext, iteration: int) -> Checkpoint:
    """checkpoints/iter-NNNN of the run, written atomically with a manifest (checkpoints.py):
    the weights and tokenizer as a Hugging Face folder, plus the optimizer and RNG states."""
    def save(path: Path) -> None:
        ctx.learner.unwrapped.save_pretrained(path)
        ctx.tokenizer.save_pretrained(path)
        torch.save({**ctx.learner.state_dict(), "rng": rng_states()}, path / "trainer_state.pt")
        if ctx.teacher_learner is not None:  # a separate teacher that trains: its own folder
            teacher = path / TEACHER_DIR
            ctx.teacher_learner.unwrapped.save_pretrained(teacher)
            ctx.proposer_tokenizer.save_pretrained(teacher)
            torch.save(ctx.teacher_learner.state_dict(), teacher / "trainer_state.pt")

    return write_checkpoint(ctx.run_dir, iteration, save)
