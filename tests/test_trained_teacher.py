"""teacher.model with teacher.train: a separate teacher that trains (two-model asymmetric
self-play). Its own learner takes the teacher's rollouts, the policy's learner the student's;
a checkpoint keeps the trained teacher and a resume continues from it. Real engines on real
checkpoints (the committed toy model), one real GASP iteration."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from selfplay_core.config import ConfigError, load_config
from tests.support.toy_models import gasp_run_with_teacher


@pytest.mark.parametrize("sets, words", [
    (["teacher.model=some/dir", "teacher.vllm_url=http://127.0.0.1:8002"],
     ["teacher.vllm_url", "teacher.train=false"]),
    (["teacher.model=some/dir", "engine.backend=vllm", "engine.vllm_url=http://127.0.0.1:8000"],
     ["teacher.train", "vllm"]),
])
def test_a_teacher_that_trains_off_the_hf_engine_is_one_error(sets, words):
    with pytest.raises(ConfigError) as e:
        load_config(None, sets)
    for w in words:
        assert w in str(e.value)


def test_a_separate_teacher_trains_by_default_when_named():
    cfg = load_config(None, ["teacher.model=some/dir"])
    assert cfg.teacher.train and cfg.teacher.model == "some/dir"


def _tokens(rolls):
    return float(sum(sum(r.loss_mask) if r.loss_mask is not None else len(r.completion_ids)
                     for r in rolls))


@pytest.fixture(scope="module")
def one_iteration(tmp_path_factory, executor):
    """One GASP iteration with a separate teacher that trains; then its checkpoint."""
    from selfplay_core.loop.context import save_checkpoint
    from selfplay_core.loop.driver import direct
    from selfplay_core.records import IterationLog

    tmp = tmp_path_factory.mktemp("trained-teacher")
    cfg, ctx, method, teacher = gasp_run_with_teacher(tmp, executor)
    log = IterationLog()
    done, student = method.run_iteration(ctx, log, direct)
    # The signal the update stage split, recomputed from the same rollouts and rewards.
    rolls = method.rollouts(ctx, done, student)
    signal = [r for r, a in zip(rolls, method.advantages(ctx, rolls)) if a != 0.0]
    ckpt = save_checkpoint(ctx, 1)
    yield cfg, ctx, log, signal, teacher, ckpt, tmp
    ctx.close()


def test_each_learner_takes_its_own_role_and_both_models_move(one_iteration):
    _, ctx, log, signal, teacher, _, _ = one_iteration
    t_sig = [r for r in signal if r.role == "teacher"]
    s_sig = [r for r in signal if r.role == "student"]
    assert t_sig and s_sig, "the iteration needs both roles' signal to say anything"
    assert log.metrics["teacher_learner/tokens"] == pytest.approx(_tokens(t_sig))
    assert log.metrics["learner/tokens"] == pytest.approx(_tokens(s_sig))
    start = AutoModelForCausalLM.from_pretrained(teacher).state_dict()
    tw, pw = ctx.teacher_engine.model.state_dict(), ctx.engine.model.state_dict()
    assert any(not torch.equal(tw[k], start[k]) for k in start)    # the teacher trained
    assert any(not torch.equal(pw[k], start[k]) for k in start)    # and so did the student
    assert any(not torch.equal(tw[k], pw[k]) for k in start)       # each on its own rollouts
    lw = ctx.teacher_learner.unwrapped.state_dict()                 # its engine got the push
    assert all(torch.equal(tw[k], lw[k]) for k in start)


def test_a_checkpoint_keeps_the_trained_teacher_and_a_resume_loads_it(one_iteration, executor):
    from selfplay_core.checkpoints import verify_checkpoint
    from selfplay_core.loop.context import build_context
    from selfplay_core.state import RunState

    cfg, ctx, _, _, teacher, ckpt, tmp = one_iteration
    manifest = verify_checkpoint(ckpt.path, ckpt.manifest_sha256)
    assert "teacher/model.safetensors" in manifest["files"]
    assert "teacher/trainer_state.pt" in manifest["files"]
    state = RunState(last_checkpoint=str(ckpt.path), checkpoint_sha256=ckpt.manifest_sha256,
                     iteration=1, goalpost_ids=ctx.state.goalpost_ids)
    again = build_context(cfg, tmp / "run", state=state, executor=executor)
    try:
        trained = ctx.teacher_learner.unwrapped.state_dict()
        loaded = again.teacher_engine.model.state_dict()
        assert all(torch.equal(loaded[k], trained[k]) for k in trained)
        assert again.teacher_learner.steps == ctx.teacher_learner.steps > 0
        start = AutoModelForCausalLM.from_pretrained(teacher).state_dict()
        ref = again.teacher_learner.ref_model.state_dict()   # the anchor stays the teacher's start
        assert all(torch.equal(ref[k], start[k]) for k in start)
    finally:
        again.close()


def test_a_resume_without_the_trained_teacher_is_one_error(one_iteration, tmp_path):
    import shutil

    from selfplay_core.checkpoints import StateError
    from selfplay_core.loop.context import teacher_weights

    cfg, _, _, _, _, ckpt, _ = one_iteration
    bare = tmp_path / "iter-0001"
    shutil.copytree(ckpt.path, bare, ignore=shutil.ignore_patterns("teacher"))
    with pytest.raises(StateError, match="no trained teacher"):
        teacher_weights(cfg, bare, resume=True)


def test_with_overlap_the_teacher_updates_in_line_and_only_the_student_waits(tmp_path, executor):
    """overlap_generation defers the policy's update to the next iteration; the separate
    teacher's update is not deferred (its tokens are never the policy's), so after the first
    of two iterations the teacher has moved, the policy has not, and the deferred rollouts
    are the student's alone."""
    from selfplay_core.loop.driver import direct
    from selfplay_core.records import IterationLog

    _, ctx, method, teacher = gasp_run_with_teacher(tmp_path, executor, "overlap_generation=true")
    try:
        log = IterationLog()
        method.run_iteration(ctx, log, direct)
        assert ctx.teacher_learner.steps > 0 and log.metrics["teacher_learner/tokens"] > 0
        start = AutoModelForCausalLM.from_pretrained(teacher).state_dict()
        tw, pw = ctx.teacher_engine.model.state_dict(), ctx.engine.model.state_dict()
        assert any(not torch.equal(tw[k], start[k]) for k in start)
        assert all(torch.equal(pw[k], start[k]) for k in start)
        pending = ctx.state.pending_update
        assert pending and {r["role"] for r in pending} == {"student"}
    finally:
        ctx.close()
