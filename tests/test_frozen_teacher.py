"""teacher.model: a frozen teacher that is not the policy writes every proposal and never gets
the learner's weights (the decomposition arm of the learning study; outside GASP's one-model
premise). Real engines on real checkpoints: the committed toy model, and a randomly initialised
model of its architecture whose proposals never parse."""


import pytest
import torch

from selfplay_core import stages as S
from selfplay_core.config import ConfigError, load_config
from selfplay_core.engines.hf import HFEngine
from selfplay_core.records import Anchor
from selfplay_core.roles.common import Rejection
from selfplay_core.roles.teacher import parse_teacher
from selfplay_core.run_context import RunContext
from selfplay_core.toyworld.bootstrap import ASSET_DIR
from tests.support.toy_models import gasp_run_with_teacher, random_toy_model


@pytest.fixture(scope="module")
def random_model_dir(tmp_path_factory):
    return random_toy_model(tmp_path_factory.mktemp("random") / "model")


@pytest.fixture(scope="module")
def goalposts():
    from selfplay_core.toyworld.splits import build_world

    return [p for p in build_world(0).goalpost_pool.problems if p.metadata["depth"] == 3][:4]


def _anchors(goalposts):
    return [Anchor(g.id, g.prompt, g.metadata["reference"], goalpost_id=g.id) for g in goalposts]


def _parsed(texts):
    return sum(not isinstance(parse_teacher(t), Rejection) for t in texts)


# ---- config: one clear error each, before anything loads ------------------------------------

@pytest.mark.parametrize("sets, words", [
    (["teacher.vllm_url=http://127.0.0.1:8002"], ["teacher.vllm_url", "teacher.model"]),
    (["teacher.model=some/dir", "teacher.train=false", "engine.backend=vllm",
      "engine.vllm_url=http://127.0.0.1:8000"], ["teacher.vllm_url", "some/dir"]),
    (["teacher.model=some/dir", "teacher.train=false", "method=rlvr",
      "student.real_tasks_per_iteration=8"], ["method rlvr has no teacher"]),
    (["teacher.model=some/dir", "teacher.train=false", "diagnostics.oracle_curriculum=true"],
     ["oracle_curriculum"]),
])
def test_bad_frozen_teacher_settings_are_one_error_naming_the_keys(sets, words):
    with pytest.raises(ConfigError) as e:
        load_config(None, sets)
    for w in words:
        assert w in str(e.value)


def test_a_teacher_folder_without_a_model_is_an_error_before_the_run(tmp_path):
    from selfplay_core.loop.context import make_teacher_engine

    cfg = load_config(None, [f"teacher.model={tmp_path}", "teacher.train=false"])
    with pytest.raises(ConfigError, match="not a model folder"):
        make_teacher_engine(cfg)
    assert make_teacher_engine(load_config(None, [])) is None


def test_a_teacher_server_that_does_not_answer_is_an_error_before_the_run(tmp_path):
    import socket

    from selfplay_core.loop.context import make_teacher_engine
    from selfplay_core.loop.engine_setup import EngineSetupError

    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = load_config(None, [f"teacher.model={tmp_path}", "teacher.train=false",
                             f"teacher.vllm_url=http://127.0.0.1:{port}"])
    with pytest.raises(EngineSetupError, match=rf"teacher.vllm_url http://127.0.0.1:{port} does not answer"):
        make_teacher_engine(cfg)


# ---- who proposes ---------------------------------------------------------------------------

def test_the_frozen_teacher_writes_the_proposals_not_the_policy(random_model_dir, goalposts):
    """Policy: random weights (its own proposals never parse, measured here on the same
    prompts); teacher: the toy checkpoint. Every proposal is the teacher's."""
    cfg = load_config(None, ["teacher.model=x", "teacher.train=false"])
    policy, teacher = HFEngine(str(random_model_dir)), HFEngine(str(ASSET_DIR))
    ctx = RunContext(cfg, engine=policy, teacher_engine=teacher)
    props = S.propose(ctx, _anchors(goalposts), "lemma", "easier", 2)
    assert len(props) == 8
    from_teacher = _parsed(p.completion.text for p in props)
    own = S.propose(RunContext(cfg, engine=policy), _anchors(goalposts), "lemma", "easier", 2)
    assert [p.prompt for p in own] == [p.prompt for p in props]
    assert _parsed(p.completion.text for p in own) == 0
    assert from_teacher >= 4, [p.completion.text[:80] for p in props]


def test_a_run_updates_the_student_and_never_the_frozen_teacher(tmp_path, executor):
    """One GASP iteration from the toy checkpoint, with a frozen copy of the same weights as
    teacher: after the update the policy's weights have moved and the teacher's equal its
    folder's; the update trained on the student's samples alone."""
    from transformers import AutoModelForCausalLM

    from selfplay_core.loop.driver import direct
    from selfplay_core.records import IterationLog

    _, ctx, method, frozen = gasp_run_with_teacher(tmp_path, executor, "teacher.train=false",
                                                   "iterations=1")
    try:
        log = IterationLog()
        done, student = method.run_iteration(ctx, log, direct)
        assert any(p.accepted for p in done) and student
        disk = AutoModelForCausalLM.from_pretrained(frozen).state_dict()
        tw = ctx.teacher_engine.model.state_dict()
        assert all(torch.equal(tw[k], disk[k]) for k in disk)
        pw = ctx.engine.model.state_dict()
        assert any(not torch.equal(pw[k], disk[k]) for k in disk)
        # teacher.train=false: every rollout the learner saw was a student sample
        rolls = S.rollouts(ctx, done, student)
        assert rolls and {r.role for r in rolls} == {"student"}
    finally:
        ctx.close()
