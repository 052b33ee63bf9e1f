"""GASP's judges, one slot (`method.judge`, chosen by `name`; none by default):

    guide     a frozen copy of the start weights reviews each proposal against its goalpost
    code      the line similarity of a proposal's program to its parent's (privileged)
    gradient  the student's gradient on a proposal against its goalpost's solution (privileged)

Each scales the in-band teacher reward by a weight in [0, 1] and can keep a proposal from the
student (its gate); `base.JudgedRound` applies whichever is set. Adding a judge: a file here
with its `JudgeConfig` subclass (a `name`, `build()`) and its `Judge`, and its config below.
"""

from typing import Annotated, Union

from pydantic import Field

from selfplay_core.methods.judges.base import Judge, JudgeConfig, JudgedRound
from selfplay_core.methods.judges.code import CodeJudge, CodeJudgeConfig
from selfplay_core.methods.judges.gradient import GradientJudge, GradientJudgeConfig
from selfplay_core.methods.judges.guide import GuideJudge, GuideJudgeConfig
from selfplay_core.registry import form_friendly_union

JUDGE_CONFIGS = (GuideJudgeConfig, CodeJudgeConfig, GradientJudgeConfig)
# The `method.judge` section: one of the judges' configs, told apart by `name`.
JudgeSection = Annotated[Union[JUDGE_CONFIGS], Field(  # noqa: UP007 - built from the tuple
    discriminator="name", json_schema_extra=form_friendly_union)]

__all__ = ["CodeJudge", "CodeJudgeConfig", "GradientJudge", "GradientJudgeConfig", "GuideJudge",
           "GuideJudgeConfig", "JUDGE_CONFIGS", "Judge", "JudgeConfig", "JudgeSection", "JudgedRound"]
