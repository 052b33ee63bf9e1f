"""AZR-style unguided self-play: the teacher proposes from K reference tasks of its own buffer
(seeded with the identity program), rewarded by learnability (1 - p when the student sometimes
solves the task); no goalposts. On the toy world the task type is induction (description and
examples -> program), the type the tiny model was bootstrapped on; deduction and abduction
need a model that writes values, i.e. the GPU setting.
"""

from selfplay_core.loop import stages as S


def run_iteration(ctx, log, call):
    a = ctx.config.azr
    anchors = ctx.buffer_anchors(a.proposals_per_iteration)
    props = call("propose_azr", S.propose, ctx, anchors, "azr", "harder", 1)
    call("validate_azr", S.validate, ctx, props, log)
    call("estimate_azr", S.estimate_pass_rates, ctx, props)
    call("score_azr", S.score, ctx, props, "azr", log)
    call("fidelity_azr", S.fidelity, ctx, props, log)
    S.remember(ctx, props)
    student = [(p.kind, p.solve) for p in props if p.solve is not None]
    student += [("real", r) for r in call("solve_real", S.solve_real_tasks, ctx, log)]
    call("update", S.update, ctx, props, student, log)
    log.proposals.extend(props)
    return props, student
