"""AZR-style unguided self-play (Absolute Zero): one model proposes and solves its own tasks
of up to three types, with no goalposts and no data.

* deduction — the proposer sees K reference triplets (program, input, output) from the
  deduction buffer and writes a new program and input; the executor runs it for the output;
  the student predicts the output from program and input.
* abduction — the same proposal from the abduction buffer; the student sees program and output
  and gives an input, checked by running the program on it in the sandbox.
* induction — the teacher writes a described task (question, program, inputs) from a buffer
  item, as in GASP's prompt; the student writes the program.

Both deduction/abduction buffers start from the identity triplet (`azr.seed_input`).
Proposals are validated in the sandbox (parses, allowed imports, deterministic across two
processes, writable output, not a near-duplicate of their type's buffer); the proposer earns
AZR's learnability `1 - p` (p = the student's pass rate; `azr.extreme_reward` at p in {0, 1}),
invalid proposals the format / invalid penalties; the student earns 1 / 0. Task-Relative
REINFORCE++ normalizes over the (task type, role) groups: with all three types, six groups.

Which types run is `azr.task_types`. The toy default is induction only (the tiny model was
bootstrapped on described tasks and programs; it never learnt to write values), GPU configs run
all three. Metrics per type: teacher/azr_<type>/{proposals,acceptance,reward,pass_rate},
rejections/azr_<type>/<reason>, student/azr_<type>/reward; teacher/azr/* over all types.
"""

from selfplay_core.loop import stages as S

INDUCTION_KINDS = ("azr_induction", "azr")  # "azr": buffers of runs from before task types


def run_iteration(ctx, log, call):
    a = ctx.config.azr
    props_all = []
    for t in a.task_types:
        kind = S.triplet_kind(t)
        if t == "induction":
            anchors = ctx.buffer_anchors(a.proposals_per_iteration, kinds=INDUCTION_KINDS)
            props = call(f"propose_{kind}", S.propose, ctx, anchors, kind, "harder", 1)
            call(f"validate_{kind}", S.validate, ctx, props, log)
            call(f"estimate_{kind}", S.estimate_pass_rates, ctx, props)
            call(f"score_{kind}", S.score, ctx, props, "azr", log)
            call(f"fidelity_{kind}", S.fidelity, ctx, props, log)
        else:
            props = call(f"propose_{kind}", S.propose_triplets, ctx, t, a.proposals_per_iteration)
            call(f"validate_{kind}", S.validate_triplets, ctx, t, props, log)
            call(f"estimate_{kind}", S.estimate_triplets, ctx, t, props, log)
            call(f"score_{kind}", S.score, ctx, props, "azr", log)
        S.remember(ctx, props)
        _student_metrics(log, kind, props)
        props_all.extend(props)
    _totals(log, props_all)
    student = S.student_tasks(ctx, props_all, log)
    student += [("real", r) for r in call("solve_real", S.solve_real_tasks, ctx, log)]
    call("update", S.update, ctx, props_all, student, log)
    log.proposals.extend(props_all)
    return props_all, student


def _student_metrics(log, kind, props) -> None:
    solved = [p.solve for p in props if p.solve is not None]
    n = sum(r.n for r in solved)
    if n:
        log.add(**{f"student/{kind}/reward": sum(r.c for r in solved) / n,
                   f"student/{kind}/tasks": len(solved)})


def _totals(log, props) -> None:
    """teacher/azr/*: over all task types (what the CLI table and benchmarks read)."""
    n = len(props)
    acc = [p for p in props if p.accepted]
    out = {"teacher/azr/proposals": n, "teacher/azr/accepted": len(acc),
           "teacher/azr/acceptance": len(acc) / n if n else 0.0}
    judged = [p for p in props if p.reward is not None]  # not a harness error
    if judged:
        out["teacher/azr/reward"] = sum(p.reward for p in judged) / len(judged)
    if acc:
        out["teacher/azr/pass_rate"] = sum(p.pass_rate for p in acc) / len(acc)
    if "teacher/azr_induction/fidelity" in log.metrics:
        out["teacher/azr/fidelity"] = log.metrics["teacher/azr_induction/fidelity"]
    log.add(**out)
