"""The proposer rewards methods hand to the shared scoring stage, as tables: GASP's bands and
AZR's learnability, with the expected values computed by hand from DESIGN.md §1's formulas."""

import pytest

from selfplay_core import stages as S
from selfplay_core.config import load_config
from selfplay_core.engines.base import Completion
from selfplay_core.methods.azr import Learnability
from selfplay_core.methods.gasp import BandReward
from selfplay_core.problems import Problem
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.rewards import r_lemma, r_lift
from selfplay_core.roles.common import Rejection
from selfplay_core.run_context import RunContext


def prop(p=None, parsed=None, kind="lemma"):
    """An accepted proposal with pass rate p, or (p None) a rejected one."""
    q = Proposal(kind, Anchor("g", "q", "c"), "f", "easier", "", Completion("x"), parsed=parsed)
    if p is not None:
        q.problem = Problem("t", "call", [], entry_point="f")
        q.pass_rate = p
    return q


LEMMA = BandReward((0.3, 0.7), -0.5, r_lemma)
LIFT = BandReward((0.1, 0.5), -0.5, r_lift)

TABLE = [
    # reward, pass rates, expected rewards: (4p(1-p))^5 in [0.3, 0.7]; 10p((1-p)/0.9)^9 in [0.1, 0.5]
    (LEMMA, [0.5, 0.3, 0.25, 0.875], [1.0, 0.84 ** 5, -0.5, -0.5]),
    (LIFT, [0.1, 0.5, 0.0, 0.625], [1.0, 5 * (0.5 / 0.9) ** 9, -0.5, -0.5]),
    (Learnability(-0.5), [0.0, 0.25, 0.75, 1.0], [-0.5, 0.75, 0.25, -0.5]),
    (Learnability(0.0), [0.0, 1.0], [0.0, 0.0]),
]


@pytest.mark.parametrize("reward,ps,expected", TABLE)
def test_proposer_rewards(reward, ps, expected):
    assert reward(None, [prop(p) for p in ps]) == pytest.approx(expected)


def test_the_scoring_stage_rewards_the_accepted_and_penalises_the_rest():
    ctx = RunContext(load_config(None))
    props = [prop(0.5), prop(None, parsed=Rejection("syntax_error")), prop(None, parsed=object()),
             prop(0.875)]
    log = IterationLog()
    S.score(ctx, props, LEMMA, log)
    # format penalty -1 for what did not parse, the invalid penalty -0.5 for a parsed reject
    assert [p.reward for p in props] == pytest.approx([1.0, -1.0, -0.5, -0.5])
    assert log.metrics == pytest.approx({"teacher/lemma/reward": -1.0 / 4, "teacher/lemma/pass_rate": 0.6875,
                                         "teacher/lemma/in_band": 0.5})
    log = IterationLog()
    S.score(ctx, [prop(0.25, kind="azr_induction"), prop(1.0, kind="azr_induction")], Learnability(-0.5), log)
    assert log.metrics["teacher/azr_induction/learnable"] == 0.5


def test_a_reward_must_give_one_value_per_accepted_proposal():
    class Short:
        def __call__(self, ctx, accepted):
            return [1.0]

        def metrics(self, accepted):
            return {}
    with pytest.raises(ValueError, match="gave 1 rewards for 2 accepted proposals"):
        S.score(RunContext(load_config(None)), [prop(0.5), prop(0.5)], Short(), IterationLog())
