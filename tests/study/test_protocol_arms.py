"""Every arm of the registered protocol is a config that loads (a typo in an override would
otherwise surface only when the study reaches that arm), and the arms set what they say."""

from pathlib import Path

import pytest

from selfplay_study.protocol import default_protocol
from selfplay_study.runner import arm_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PROTO = default_protocol()


@pytest.mark.parametrize("arm", [a for a in PROTO.arms if a.trains], ids=lambda a: a.name)
def test_every_training_arm_loads(arm, tmp_path):
    cfg = arm_config(arm, PROTO, 0, CONFIGS, tmp_path)
    assert cfg.iterations == PROTO.iterations and cfg.seed == 0
    assert cfg.tracking.run_name == f"{arm.name}-s0"


def test_the_no_teacher_update_arms_differ_from_gasp_only_where_they_say(tmp_path):
    arms = {a.name: a for a in PROTO.arms}
    gasp, off, band = (arm_config(arms[n], PROTO, 0, CONFIGS, tmp_path) for n in
                       ("gasp", "gasp-no-teacher-update", "gasp-no-teacher-update-band"))
    assert gasp.teacher.train and not off.teacher.train and not band.teacher.train
    assert gasp.student.train_band == off.student.train_band == (0.0, 1.0)
    assert band.student.train_band == (0.1, 0.7)
    assert off.model_copy(update={"teacher": gasp.teacher, "tracking": gasp.tracking}) == gasp
