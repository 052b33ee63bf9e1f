"""The iteration wall-time split (loop/timing.py): each second lands in exactly one part. A fake
clock drives time.perf_counter, so the expected split is exact and no wall time is asserted."""

import pytest

from selfplay_core.loop import driver, recorder, timing


class FakeTime:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    def spend(self, seconds):
        self.now += seconds


class Engine:
    def __init__(self, t):
        self.t, self.device = t, "cpu"

    def generate(self, prompts, n, sampling):
        self.t.spend(2.0)
        return [[] for _ in prompts]


class Executor:
    isolation = "none"

    def __init__(self, t):
        self.t = t

    def verify(self, items):
        self.t.spend(3.0)
        return []

    def run(self, items, rotate=0):
        self.t.spend(0.5)
        return []


class Ctx:
    def __init__(self, t):
        self.engine, self.executor = Engine(t), Executor(t)


@pytest.fixture()
def fake_time(monkeypatch):
    t = FakeTime()
    monkeypatch.setattr(timing.time, "perf_counter", t.perf_counter)
    monkeypatch.setattr(recorder.time, "perf_counter", t.perf_counter)
    return t


def test_every_second_lands_in_one_part(fake_time):
    t = fake_time
    ctx = Ctx(t)
    clock = timing.attach(ctx)
    timed = recorder.timed(driver.direct, {}, clock)

    def propose(ctx):            # 2 s generating + 1 s of its own Python
        ctx.engine.generate(["p"], 1, None)
        t.spend(1.0)

    def validate(ctx):           # 0.5 s running references + 3 s verifying
        ctx.executor.run([])
        ctx.executor.verify([])

    def update(ctx):             # learner + sync: 4 s, nothing else
        t.spend(4.0)

    def evaluate(ctx):           # its own generation and verification stay evaluation's
        ctx.engine.generate(["p"], 1, None)
        ctx.executor.verify([])

    start = t.now
    for name, fn in (("propose_lemma", propose), ("validate_lemma", validate), ("update", update),
                     ("evaluate", evaluate)):
        timed(name, fn, ctx)
    t.spend(0.25)                # between stages: the loop itself
    split = clock.split(t.now - start)
    assert split == {"time/split/generation_s": 2.0, "time/split/verification_s": 3.5,
                     "time/split/update_s": 4.0, "time/split/evaluation_s": 5.0,
                     "time/split/goalposts_s": 0.0, "time/split/orchestration_s": 1.25}
    assert sum(split.values()) == t.now - start
    clock.reset()
    assert sum(clock.split(0.0).values()) == 0.0


def test_the_wrappers_are_transparent(fake_time):
    ctx = Ctx(fake_time)
    inner = ctx.engine
    timing.attach(ctx)
    timing.attach(ctx)                    # attaching twice does not wrap twice
    assert ctx.engine.wrapped is inner and ctx.engine.device == "cpu"
    assert ctx.executor.isolation == "none"
    ctx.engine.device = "cuda"            # attribute writes reach the engine
    assert inner.device == "cuda"
