"""Real-data RLVR: the student trains on the real training split; no teacher."""

from selfplay_core import stages as S


def run_iteration(ctx, log, call):
    student = [("real", r) for r in call("solve_real", S.solve_real_tasks, ctx, log)]
    call("update", S.update, ctx, [], student, log)
    return [], student
