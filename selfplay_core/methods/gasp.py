"""GASP: goalposts guide the teacher. Lemma (easier variant of a goalpost, along axis f or io,
rewarded by the band [0.3, 0.7]) then lift (harder variant of the lemma with the goalpost hidden,
band [0.1, 0.5]); the student trains on both. Ablations: one-step medium / hard (straight from
the goalpost with one band), no io axis (teacher.axes), no rejection sampling; with
student.real_tasks_per_iteration > 0 real training tasks join the student batch (GASP + RLVR).
"""

from selfplay_core import stages as S
from selfplay_core.records import Anchor


def _round(ctx, log, call, anchors, kind, direction, band):
    n = ctx.config.teacher.proposals_per_anchor
    props = call(f"propose_{kind}", S.propose, ctx, anchors, kind, direction, n)
    call(f"validate_{kind}", S.validate, ctx, props, log)
    call(f"estimate_{kind}", S.estimate_pass_rates, ctx, props)
    call(f"score_{kind}", S.score, ctx, props, band, log)
    call(f"fidelity_{kind}", S.fidelity, ctx, props, log)
    S.remember(ctx, props)
    return props


def run_iteration(ctx, log, call):
    t = ctx.config.teacher
    goalposts = ctx.goalpost_anchors(t.goalposts_per_iteration)
    if t.one_step:
        band = "lemma" if t.one_step == "medium" else "lift"
        teacher = _round(ctx, log, call, goalposts, t.one_step, "easier", band)
    else:
        lemmas = _round(ctx, log, call, goalposts, "lemma", "easier", "lemma")
        # The lift prompt shows the lemma only: the goalpost stays hidden.
        parents = [Anchor(p.id, p.parsed.question, p.parsed.code, p.anchor.goalpost_id, p.axis)
                   for p in lemmas if p.accepted]
        if not parents:
            parents = ctx.buffer_anchors(t.goalposts_per_iteration, kinds=("lemma",))
            parents = [a for a in parents if a.id != "azr-seed"]
        parents = parents[: t.goalposts_per_iteration]
        lifts = _round(ctx, log, call, parents, "lift", "harder", "lift") if parents else []
        teacher = lemmas + lifts
    student = S.student_tasks(ctx, teacher, log)
    if ctx.config.student.replay_tasks_per_iteration:
        student += call("solve_replay", S.solve_replay_tasks, ctx, log)
    student += [("real", r) for r in call("solve_real", S.solve_real_tasks, ctx, log)]
    call("update", S.update, ctx, teacher, student, log)
    log.proposals.extend(teacher)
    return teacher, student
