"""Buffer replay: earlier accepted proposals (in student.train_band when proposed) are solved
afresh and join the student batch while their new pass rate is still in the band."""

import random

from selfplay_core import stages as S
from selfplay_core.buffers import BufferItem, TaskBuffer
from selfplay_core.config import load_config
from selfplay_core.engines.base import Completion
from selfplay_core.methods.gasp import REPLAY_KINDS
from selfplay_core.records import IterationLog
from selfplay_core.run_context import RunContext
from selfplay_core.state import RunState

RIGHT, WRONG = "    return sorted(x)\n", "    return x\n"


class ScriptedEngine:
    """Answers each prompt with `right` correct bodies out of n (by the prompt's question)."""

    def __init__(self, right_by_question):
        self.right = right_by_question
        self.prompts = []

    def generate(self, prompts, n, sampling):
        self.prompts += prompts
        out = []
        for p in prompts:
            k = next(v for q, v in self.right.items() if q in p)
            out.append([Completion(RIGHT if j < k else WRONG, token_ids=[1], logprobs=[0.0],
                                   prompt_token_ids=[1]) for j in range(n)])
        return out


def item(i, question, pass_rate, iteration=0, kind="lemma"):
    ins = [[[3, 1, 2]], [[5, 4]], [[2, 9, 1]]]
    outs = [sorted(a[0]) for a in ins]
    return BufferItem(f"b{i}", kind, question, "def f(x):\n    return sorted(x)\n", ins, outs,
                      iteration=iteration, pass_rate=pass_rate)


def test_replay_solves_in_band_buffer_tasks_and_keeps_those_still_in_band(executor):
    buffers = TaskBuffer(threshold=0.95)
    for b in [item(0, "Sort A.", 0.5), item(1, "Sort B.", 0.0), item(2, "Sort C.", 0.5, iteration=3),
              item(3, "Sort D.", 0.625, kind="lift"), item(4, "Sort E.", 0.375),
              item(5, "Sort F.", 0.5, kind="azr_induction")]:
        buffers.add(b)
    cfg = load_config(None, ["student.train_band=[0.3, 0.9]", "student.replay_tasks_per_iteration=8"])
    engine = ScriptedEngine({"Sort A.": 4, "Sort B.": 4, "Sort C.": 4, "Sort D.": 6, "Sort E.": 8,
                             "Sort F.": 4})
    ctx = RunContext(cfg, buffers=buffers, executor=executor, engine=engine,
                     state=RunState(iteration=3), rng=random.Random(0))
    log = IterationLog()
    got = S.solve_replay_tasks(ctx, REPLAY_KINDS, log)
    # B was out of band when proposed, C is this iteration's, F is not a GASP kind: never asked;
    # E is now always solved: no longer in band.
    assert sorted(p.split("\n")[1] for p in engine.prompts) == ["Sort A.", "Sort D.", "Sort E."]
    assert sorted((k, r.problem.id, r.c) for k, r in got) == [("lemma", "b0", 4), ("lift", "b3", 6)]
    assert log.metrics["student/replay/tasks"] == 2


def test_no_replay_by_default():
    ctx = RunContext(load_config(None, []))
    assert S.solve_replay_tasks(ctx, REPLAY_KINDS, IterationLog()) == []
