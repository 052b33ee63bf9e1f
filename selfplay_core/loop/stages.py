"""The stages of an iteration, shared by every method: propose, validate, estimate pass rates,
score, collect student rollouts, update, evaluate, track goalposts.

Each stage is a plain function of the run context (`loop.context.RunContext`) so Prefect tasks
can wrap them one to one and tests can call them directly.
"""

from __future__ import annotations

import ast
import random
import time
from typing import Sequence

from selfplay_core import rewards
from selfplay_core.buffers import BufferItem
from selfplay_core.engines.base import SamplingParams
from selfplay_core.loop.records import Anchor, IterationLog, Proposal
from selfplay_core.problems import Problem, TestCase
from selfplay_core.rl import advantages as adv_mod
from selfplay_core.rl.learner import Rollout
from selfplay_core.sandbox.worker import Digest
from selfplay_core.roles import azr as azr_role
from selfplay_core.roles.common import Rejection
from selfplay_core.roles.teacher import STOP as TEACHER_STOP
from selfplay_core.roles.teacher import parse_teacher, teacher_prompt
from selfplay_core.toyworld.evaluate import SolveResult, solve
from selfplay_core.toyworld.metrics import mean_pass_at_k

# Imports a proposal's reference program may use: pure computation only.
ALLOWED_IMPORTS = frozenset({"math", "collections", "itertools", "functools", "heapq", "bisect",
                             "re", "string", "typing", "operator", "fractions", "decimal",
                             "statistics", "copy", "array", "dataclasses", "enum"})


def teacher_sampling(ctx) -> SamplingParams:
    e = ctx.config.engine
    temp = e.temperature if e.teacher_temperature is None else e.teacher_temperature
    return SamplingParams(temperature=temp, top_p=e.top_p,
                          max_new_tokens=e.max_new_tokens_teacher, stop=TEACHER_STOP,
                          seed=ctx.next_seed())


def student_sampling(ctx, temperature: float | None = None) -> SamplingParams:
    e = ctx.config.engine
    return SamplingParams(temperature=e.temperature if temperature is None else temperature,
                          top_p=e.top_p, max_new_tokens=e.max_new_tokens_student,
                          seed=ctx.next_seed())


# ---- propose -----------------------------------------------------------------------------------

def propose(ctx, anchors: Sequence[Anchor], kind: str, direction: str, n: int) -> list[Proposal]:
    """n teacher samples per anchor; the axis is the anchor's (lift) or drawn at random."""
    axes = ctx.config.teacher.axes
    plan = []
    for a in anchors:
        axis = a.axis if (a.axis in axes) else ctx.rng.choice(axes)
        plan.append((a, axis, teacher_prompt(a.question, a.code, axis, direction)))
    if not plan:
        return []
    sp = teacher_sampling(ctx)
    groups = ctx.engine.generate([p for _, _, p in plan], n, sp)
    out = []
    for (a, axis, prompt), comps in zip(plan, groups):
        for c in comps:
            out.append(Proposal(kind, a, axis, direction, prompt, c,
                                id=f"it{ctx.state.iteration}/{kind}/{ctx.next_id()}",
                                temperature=sp.temperature))
    return out


# ---- validate ----------------------------------------------------------------------------------

def _banned_import(code: str) -> str | None:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return "syntax"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for name in names:
            if name.split(".")[0] not in ALLOWED_IMPORTS:
                return name
    return None


def run_twice(ctx, items: list[tuple[Problem, str]]) -> list[tuple[object, str | None]]:
    """Run each (problem, reference program) in two different worker processes (different hash
    seeds): (first RunResult, None) when both runs succeed with identical outputs, else
    (first RunResult, rejection reason)."""
    if not items:
        return []
    first = ctx.executor.run(items, rotate=0)
    second = ctx.executor.run(items, rotate=1)
    out = []
    for r1, r2 in zip(first, second):
        if not r1.ok:
            err = next((e for e in r1.errors if e), r1.detail or "")
            out.append((r1, "reference_timeout" if err.startswith("timeout") else "reference_error"))
        elif not r2.ok or r1.outputs != r2.outputs:
            out.append((r1, "nondeterministic"))
        else:
            out.append((r1, None))
    return out


def _rejector(reasons: dict[str, int]):
    """reject(proposal, reason): marks it rejected and counts the reason."""
    def reject(p: Proposal, reason: str) -> None:
        p.rejection = reason
        reasons[reason] = reasons.get(reason, 0) + 1
    return reject


def _log_acceptance(log: IterationLog, kind: str, proposals: list[Proposal], reasons: dict[str, int]) -> None:
    n = len(proposals)
    acc = sum(p.accepted for p in proposals)
    log.add(**{f"teacher/{kind}/proposals": n, f"teacher/{kind}/accepted": acc,
               f"teacher/{kind}/acceptance": acc / n if n else 0.0})
    for r, c in reasons.items():
        log.metrics[f"rejections/{kind}/{r}"] = log.metrics.get(f"rejections/{kind}/{r}", 0) + c


def validate(ctx, proposals: list[Proposal], log: IterationLog) -> None:
    """Parse, then gate: allowed imports, reference runs in time, identical outputs in two worker
    processes (different hash seeds), enough distinct inputs/outputs, not a near-duplicate of
    the buffers or of a batch-mate, not an evaluation item. Rejections counted by reason."""
    t = ctx.config.teacher
    reasons: dict[str, int] = {}
    reject = _rejector(reasons)

    todo = []
    for p in proposals:
        p.parsed = parse_teacher(p.completion.text, min_inputs=t.min_inputs, max_inputs=t.max_inputs)
        if isinstance(p.parsed, Rejection):
            reject(p, f"parse_{p.parsed.reason}")
            continue
        bad = _banned_import(p.parsed.code)
        if bad:
            reject(p, "banned_import")
            continue
        prob = Problem(id=p.id, kind="call", entry_point="f", prompt=p.parsed.question,
                       tests=[TestCase(args=list(a), has_expected=False) for a in p.parsed.inputs],
                       time_limit_s=1.0, memory_limit_mb=256,
                       metadata={"reference": p.parsed.code, "signature": "def f(x):",
                                 "kind": p.kind, "axis": p.axis})
        todo.append((p, prob))
    if todo:
        runs = run_twice(ctx, [(prob, p.parsed.code) for p, prob in todo])
        batch_texts: list[str] = []
        for (p, prob), (r1, bad) in zip(todo, runs):
            if bad:
                reject(p, bad)
                continue
            if len({repr(o) for o in r1.outputs}) < t.require_distinct_outputs:
                reject(p, "degenerate_outputs")
                continue
            text = f"{p.parsed.question}\n{p.parsed.code}"
            if t.rejection_sampling:
                dup, _ = ctx.buffers.is_near_duplicate(text, batch_texts)
                if dup:
                    reject(p, "near_duplicate")
                    continue
            if ctx.contamination.is_near_duplicate(text)[0] or _overlaps_eval(ctx, p.parsed.question):
                reject(p, "eval_contamination")
                continue
            batch_texts.append(text)
            prob.tests = [TestCase(args=tc.args, expected=o) for tc, o in zip(prob.tests, r1.outputs)]
            p.problem = prob
    kind = proposals[0].kind if proposals else "none"
    _log_acceptance(log, kind, proposals, reasons)


def _overlaps_eval(ctx, question: str) -> bool:
    """Real-data worlds: the question shares too many word 8-grams with an evaluation item."""
    dec = getattr(ctx, "decontaminator", None)
    return dec is not None and dec.check(question).contaminated


# ---- estimate + score --------------------------------------------------------------------------

def estimate_pass_rates(ctx, proposals: list[Proposal]) -> None:
    """n student samples per accepted proposal: p for the teacher, rollouts for the student."""
    acc = [p for p in proposals if p.accepted]
    if not acc:
        return
    n = ctx.config.student.samples_per_task
    results = solve(ctx.engine, ctx.executor, [p.problem for p in acc], n, student_sampling(ctx))
    for p, r in zip(acc, results):
        p.solve = r
        p.pass_rate = r.c / r.n


def score(ctx, proposals: list[Proposal], band_kind: str, log: IterationLog) -> None:
    t = ctx.config.teacher
    for p in proposals:
        if not p.accepted:
            p.reward = rewards.invalid_proposal(parsed=not isinstance(p.parsed, Rejection),
                                                format_fail=t.format_penalty,
                                                invalid=t.invalid_penalty)
        elif band_kind == "lemma":
            p.reward = rewards.r_lemma(p.pass_rate, band=t.lemma_band, out_of_band=t.out_of_band)
        elif band_kind == "lift":
            p.reward = rewards.r_lift(p.pass_rate, band=t.lift_band, out_of_band=t.out_of_band)
        else:  # azr
            p.reward = rewards.azr_propose(p.pass_rate, extreme=ctx.config.azr.extreme_reward)
    kind = proposals[0].kind if proposals else "none"
    acc = [p for p in proposals if p.accepted]
    if proposals:
        log.add(**{f"teacher/{kind}/reward": sum(p.reward for p in proposals) / len(proposals)})
    if acc:
        log.add(**{f"teacher/{kind}/pass_rate": sum(p.pass_rate for p in acc) / len(acc)})
        if band_kind == "azr":  # learnable: solved sometimes, not always
            log.add(**{f"teacher/{kind}/learnable": sum(0 < p.pass_rate < 1 for p in acc) / len(acc)})
        else:
            band = t.lemma_band if band_kind == "lemma" else t.lift_band
            in_band = sum(band[0] <= p.pass_rate <= band[1] for p in acc)
            log.add(**{f"teacher/{kind}/in_band": in_band / len(acc)})


def fidelity(ctx, proposals: list[Proposal], log: IterationLog) -> None:
    """Toy world only: share of accepted proposals whose text describes their code."""
    acc = [p for p in proposals if p.accepted]
    if not acc or ctx.fidelity_fn is None:
        return
    res = ctx.fidelity_fn(ctx.executor, [(p.parsed.question, p.parsed.code, p.parsed.inputs) for p in acc])
    for p, f in zip(acc, res):
        p.faithful = f.faithful
    log.add(**{f"teacher/{acc[0].kind}/fidelity": sum(f.faithful for f in res) / len(res)})


def remember(ctx, proposals: list[Proposal]) -> None:
    """Accepted proposals join the buffer, with provenance."""
    for p in proposals:
        if p.accepted:
            ctx.buffers.add(BufferItem(
                id=p.id, kind=p.kind, question=p.parsed.question, code=p.parsed.code,
                inputs=[tc.args for tc in p.problem.tests],
                outputs=[tc.expected for tc in p.problem.tests], iteration=ctx.state.iteration,
                goalpost_id=p.anchor.goalpost_id, parent_id=p.anchor.id, axis=p.axis,
                pass_rate=p.pass_rate, extra=_dedupe_extra(p.problem)))


def _dedupe_extra(problem: Problem) -> dict:
    text = problem.metadata.get("dedupe_text")
    return {"text": text} if text else {}


# ---- AZR deduction / abduction: triplets (program, input, output) ------------------------------

def triplet_kind(task_type: str) -> str:
    return f"azr_{task_type}"


def _fits(ctx, prompt: str, max_new_tokens: int) -> bool:
    limit = getattr(ctx.engine, "max_length", None)
    tok = getattr(ctx, "tokenizer", None)
    if not limit or tok is None:
        return True
    return len(tok(prompt, add_special_tokens=False)["input_ids"]) + max_new_tokens <= limit


def reference_triplets(ctx, task_type: str, k: int) -> list[tuple[str, azr_role.Triplet]]:
    """K reference triplets (id, triplet) from the buffer of this task type; the identity
    triplet while that buffer is empty."""
    kind = triplet_kind(task_type)
    items = [b for b in ctx.buffers if b.kind == kind and b.inputs and b.outputs]
    if not items:
        seed = azr_role.parse_literal(ctx.config.azr.seed_input).value
        return [("azr-seed", azr_role.Triplet.identity(seed))][: max(k, 1)]
    picked = ctx.rng.sample(items, min(k, len(items)))
    return [(b.id, azr_role.Triplet(b.code, list(b.inputs[0]), b.outputs[0])) for b in picked]


def propose_triplets(ctx, task_type: str, n: int) -> list[Proposal]:
    """n proposer prompts, each with its own K references (as many as fit the context)."""
    kind = triplet_kind(task_type)
    e = ctx.config.engine
    plan = []
    for _ in range(n):
        refs = reference_triplets(ctx, task_type, ctx.config.azr.references)
        prompt = azr_role.proposer_prompt(task_type, [t for _, t in refs])
        while len(refs) > 1 and not _fits(ctx, prompt, e.max_new_tokens_teacher):
            refs = refs[:-1]
            prompt = azr_role.proposer_prompt(task_type, [t for _, t in refs])
        first = refs[0] if refs else ("azr-seed", None)
        anchor = Anchor(first[0], "", first[1].program if first[1] else azr_role.IDENTITY_PROGRAM)
        plan.append((anchor, prompt))
    if not plan:
        return []
    temp = e.temperature if e.teacher_temperature is None else e.teacher_temperature
    sp = SamplingParams(temperature=temp, top_p=e.top_p, max_new_tokens=e.max_new_tokens_teacher,
                        stop=azr_role.STOP, seed=ctx.next_seed())
    groups = ctx.engine.generate([p for _, p in plan], 1, sp)
    return [Proposal(kind, a, "", "propose", prompt, comps[0],
                     id=f"it{ctx.state.iteration}/{kind}/{ctx.next_id()}", temperature=temp)
            for (a, prompt), comps in zip(plan, groups)]


def validate_triplets(ctx, task_type: str, proposals: list[Proposal], log: IterationLog) -> None:
    """Parse (a program and one input literal), then gate: allowed imports, the program runs in
    time and gives the same output in two worker processes, the output is a literal a student
    could write (not too large), the student's prompt fits the model, and the task is not a
    near-duplicate of this type's buffer or a batch-mate (or an evaluation item)."""
    a = ctx.config.azr
    kind = triplet_kind(task_type)
    reasons: dict[str, int] = {}
    reject = _rejector(reasons)

    todo = []
    for p in proposals:
        p.parsed = azr_role.parse_proposal(p.completion.text, max_chars=a.max_literal_chars)
        if isinstance(p.parsed, Rejection):
            reject(p, f"parse_{p.parsed.reason}")
            continue
        if _banned_import(p.parsed.code):
            reject(p, "banned_import")
            continue
        prob = Problem(id=p.id, kind="call", entry_point="f",
                       tests=[TestCase(args=list(p.parsed.args), has_expected=False)],
                       time_limit_s=1.0, memory_limit_mb=256)
        todo.append((p, prob))
    batch_texts: list[str] = []
    for (p, prob), (r1, bad) in zip(todo, run_twice(ctx, [(prob, p.parsed.code) for p, prob in todo])):
        if bad:
            reject(p, bad)
            continue
        out = r1.outputs[0]
        why = (Rejection(azr_role.TOO_LARGE) if type(out) is Digest
               else azr_role.is_literal_value(out, a.max_literal_chars))
        if why is not None:
            reject(p, f"output_{why.reason}")
            continue
        prompt = azr_role.solver_prompt(task_type, p.parsed.code, p.parsed.args, out)
        if not _fits(ctx, prompt, ctx.config.engine.max_new_tokens_student):
            reject(p, "too_long")
            continue
        text = f"{p.parsed.code}\n{azr_role.show_input(p.parsed.args)}"
        if ctx.config.teacher.rejection_sampling:
            if ctx.buffers.is_near_duplicate(text, batch_texts, kinds=(kind,))[0]:
                reject(p, "near_duplicate")
                continue
        # Code only (no question here): a weaker gate than for induction proposals.
        # Code only (no question here): a weaker gate than for induction proposals.
        if ctx.contamination.is_near_duplicate(f"\n{p.parsed.code}")[0]:
            reject(p, "eval_contamination")
            continue
        batch_texts.append(text)
        prob.tests = [TestCase(args=list(p.parsed.args), expected=out)]
        prob.prompt = prompt
        prob.metadata = {"reference": p.parsed.code, "azr_type": task_type,
                         "n_params": p.parsed.n_params, "dedupe_text": text,
                         "signature": "def f(x):"}
        p.problem = prob
    _log_acceptance(log, kind, proposals, reasons)


def estimate_triplets(ctx, task_type: str, proposals: list[Proposal], log: IterationLog) -> None:
    """n student samples per accepted task. Deduction: the predicted literal equals the output
    (typed comparison, in this process: it is data). Abduction: the program, run in the sandbox
    on the student's input, gives the output. Unparseable answers fail."""
    acc = [p for p in proposals if p.accepted]
    if not acc:
        return
    n = ctx.config.student.samples_per_task
    e = ctx.config.engine
    sp = SamplingParams(temperature=e.temperature, top_p=e.top_p, max_new_tokens=e.max_new_tokens_student,
                        stop=azr_role.ANSWER_STOP, seed=ctx.next_seed())
    groups = ctx.engine.generate([p.problem.prompt for p in acc], n, sp)
    want = "output" if task_type == "deduction" else "input"
    answers = [[azr_role.parse_answer(c.text, want) for c in comps] for comps in groups]
    if task_type == "deduction":
        passed = [[azr_role.check_deduction(ans, p.problem.tests[0].expected) for ans in row]
                  for p, row in zip(acc, answers)]
    else:
        flat = [(p.problem.metadata["reference"], ans, p.problem.metadata["n_params"],
                 p.problem.tests[0].expected) for p, row in zip(acc, answers) for ans in row]
        ok = azr_role.check_abductions(ctx.executor, flat)
        passed = [ok[i * n:(i + 1) * n] for i in range(len(acc))]
    parsed = 0
    for p, comps, row, oks in zip(acc, groups, answers, passed):
        rej = [a.reason if isinstance(a, Rejection) else (None if ok else "wrong_answer")
               for a, ok in zip(row, oks)]
        parsed += sum(not isinstance(a, Rejection) for a in row)
        p.solve = SolveResult(p.problem, comps, list(oks), rej)
        p.pass_rate = sum(oks) / len(oks)
    kind = triplet_kind(task_type)
    log.add(**{f"student/{kind}/parsed": parsed / (n * len(acc))})


# ---- real tasks (RLVR and the GASP + real-data mix) --------------------------------------------

def solve_real_tasks(ctx, log: IterationLog) -> list[SolveResult]:
    k = ctx.config.student.real_tasks_per_iteration
    if k == 0:
        return []
    tasks = ctx.next_real_tasks(k)
    res = solve(ctx.engine, ctx.executor, tasks, ctx.config.student.samples_per_task, student_sampling(ctx))
    log.add(**{"student/real/pass_rate": sum(r.c for r in res) / max(1, sum(r.n for r in res))})
    return res


def student_tasks(ctx, proposals: Sequence[Proposal], log: IterationLog) -> list[tuple[str, SolveResult]]:
    """The self-proposed tasks that join the student batch: solved, with p in student.train_band."""
    lo, hi = ctx.config.student.train_band
    solved = [p for p in proposals if p.solve is not None]
    kept = [p for p in solved if lo <= p.pass_rate <= hi]
    if solved:
        log.add(**{"student/trained/tasks": len(kept), "student/trained/share": len(kept) / len(solved)})
    return [(p.kind, p.solve) for p in kept]


REPLAY_KINDS = ("lemma", "lift", "medium", "hard")


def solve_replay_tasks(ctx, log: IterationLog) -> list[tuple[str, SolveResult]]:
    """Earlier accepted proposals (p in student.train_band when proposed), solved afresh; those
    whose new p is still in the band join the student batch under their own kind."""
    st = ctx.config.student
    k = st.replay_tasks_per_iteration
    if k == 0:
        return []
    lo, hi = st.train_band
    pool = [b for b in ctx.buffers if b.kind in REPLAY_KINDS and b.iteration < ctx.state.iteration
            and b.pass_rate is not None and lo <= b.pass_rate <= hi and b.inputs and b.outputs]
    if not pool:
        return []
    picked = ctx.rng.sample(pool, min(k, len(pool)))
    probs = [Problem(id=b.id, kind="call", entry_point="f", prompt=b.question,
                     tests=[TestCase(args=list(a), expected=o) for a, o in zip(b.inputs, b.outputs)],
                     time_limit_s=1.0, memory_limit_mb=256,
                     metadata={"reference": b.code, "signature": "def f(x):", "kind": b.kind})
             for b in picked]
    res = solve(ctx.engine, ctx.executor, probs, st.samples_per_task, student_sampling(ctx))
    kept = [(b.kind, r) for b, r in zip(picked, res) if lo <= r.c / r.n <= hi]
    log.add(**{"student/replay/pass_rate": sum(r.c for r in res) / max(1, sum(r.n for r in res)),
               "student/replay/tasks": len(kept)})
    return kept


# ---- update ------------------------------------------------------------------------------------

def _rollout(c, reward: float, role: str, kind: str, group: str, temperature: float) -> Rollout | None:
    if not c.token_ids or c.logprobs is None or c.prompt_token_ids is None:
        return None
    return Rollout(list(c.prompt_token_ids), list(c.token_ids), list(c.logprobs), 0.0, role,
                   {"kind": kind, "group": group, "reward": reward}, temperature=temperature)


def update(ctx, teacher: list[Proposal], student: list[tuple[str, SolveResult]],
           log: IterationLog) -> dict:
    """Advantages by group, then the learner's epochs on teacher + student rollouts; the engine
    then receives the new weights (in place for hf, pushed to the server for vllm). With
    overlap_generation the epochs run during the next iteration (loop/overlap.py)."""
    if ctx.config.overlap_generation:
        return _overlapped_update(ctx, teacher, student, log)
    signal = update_batch(ctx, teacher, student, log)
    if not signal:
        return {}
    t0 = time.perf_counter()
    with ctx.learner_turn():  # a colocated vLLM server sleeps through the update
        # PPO epochs; the train/inference mismatch (mismatch/*) comes from the first
        metrics = ctx.learner.update(signal, epochs=ctx.config.updates_per_iteration)
    metrics.update(ctx.push_weights())
    metrics["time/update_s"] = time.perf_counter() - t0
    log.add(**metrics)
    return metrics


def _overlapped_update(ctx, teacher, student, log: IterationLog) -> dict:
    """Wait for the previous iteration's update (running since this iteration began), push its
    weights, then keep this iteration's rollouts for the next one; the last iteration updates
    in line."""
    t0 = time.perf_counter()
    metrics = ctx.background.join_and_push()
    signal = update_batch(ctx, teacher, student, log)
    if signal and ctx.state.iteration + 1 >= ctx.config.iterations:
        with ctx.learner_turn():
            metrics.update(ctx.learner.update(signal, epochs=ctx.config.updates_per_iteration))
        metrics.update(ctx.push_weights())
    elif signal:
        ctx.background.defer(signal)
    metrics["time/update_s"] = time.perf_counter() - t0
    log.add(**metrics)
    return metrics


def update_batch(ctx, teacher: list[Proposal], student: list[tuple[str, SolveResult]],
                 log: IterationLog) -> list[Rollout]:
    """The rollouts the learner trains on: teacher and student completions with their
    advantages by group, those with a zero advantage dropped."""
    rolls: list[Rollout] = []
    for p in teacher:
        r = _rollout(p.completion, p.reward, "teacher", p.kind, p.id, p.temperature)
        if r:
            rolls.append(r)
    cap = ctx.config.student.batch_size
    student_rolls = []
    for kind, res in student:
        for c, ok in zip(res.completions, res.passed):
            r = _rollout(c, rewards.student(ok), "student", kind, res.problem.id,
                         ctx.config.engine.temperature)
            if r:
                student_rolls.append(r)
    if len(student_rolls) > cap:  # keep whole groups
        n = ctx.config.student.samples_per_task
        groups = [student_rolls[i:i + n] for i in range(0, len(student_rolls), n)]
        ctx.rng.shuffle(groups)
        student_rolls = [r for g in groups[: cap // n] for r in g]
    rolls += student_rolls
    if not rolls:
        return []
    rs = [r.meta["reward"] for r in rolls]
    method = ctx.config.advantage
    if method == "trr++":
        advs = adv_mod.task_relative_reinforce_pp(rs, [r.meta["kind"] for r in rolls], [r.role for r in rolls])
    elif method == "grpo":
        advs = adv_mod.grpo(rs, [(r.role, r.meta["group"]) for r in rolls])
    else:
        advs = adv_mod.dr_grpo(rs, [(r.role, r.meta["group"]) for r in rolls])
    for r, a in zip(rolls, advs):
        r.advantage = a
    signal = [r for r in rolls if r.advantage != 0.0]
    log.add(**{"learner/signal_share": len(signal) / len(rolls),
               "learner/teacher_rollouts": sum(r.role == "teacher" for r in rolls),
               "learner/student_rollouts": sum(r.role == "student" for r in rolls)})
    return signal


# ---- evaluation and goalposts ------------------------------------------------------------------

def evaluate(ctx, log: IterationLog) -> dict:
    """Held-out pass@1 and pass@k by group (pass@1 alone hides diversity collapse): by depth in
    the toy world (eval/d3/...), by evaluation set in a real-data world (eval/lcb/...,
    eval/humanevalplus/...); eval/all/... over every problem."""
    e = ctx.config.eval
    probs = ctx.eval_problems
    res = solve(ctx.engine, ctx.executor, probs, e.n, student_sampling(ctx))
    out = {}
    groups: dict = {}
    for r in res:
        meta = r.problem.metadata
        key = meta.get("eval_set") or f"d{meta.get('depth', 0)}"
        groups.setdefault(key, []).append((r.n, r.c))
    for g, counts in sorted(groups.items()):
        for k in e.ks:
            out[f"eval/{g}/pass@{k}"] = mean_pass_at_k(counts, k)
    for k in e.ks:
        out[f"eval/all/pass@{k}"] = mean_pass_at_k([(r.n, r.c) for r in res], k)
    log.add(**out)
    return out


def track_goalposts(ctx, label: str, log: IterationLog) -> list[float]:
    """pass@k per goalpost for the current weights: one row of the checkpoint x goalpost matrix."""
    k = ctx.config.eval.goalpost_k
    gps = ctx.goalposts
    if not gps:
        return []
    res = solve(ctx.engine, ctx.executor, gps, k, student_sampling(ctx))
    row = [r.c / r.n for r in res]  # pass rate; solved means pass@k > 0, i.e. any pass
    ctx.state.goalpost_rows.append(row)
    ctx.state.goalpost_labels.append(label)
    solved = sum(1 for v in row if v > 0)
    union = sum(1 for j in range(len(gps)) if any(r[j] > 0 for r in ctx.state.goalpost_rows))
    log.add(**{"goalposts/solved": solved, "goalposts/solved_union": union,
               "goalposts/total": len(gps)})
    return row


def entropy_of(proposals: Sequence[Proposal]) -> float:
    """Mean negative logprob per sampled token (a cheap entropy estimate of the sampler)."""
    lps = [lp for p in proposals for lp in (p.completion.logprobs or [])]
    return -sum(lps) / len(lps) if lps else float("nan")


def shuffled(rng: random.Random, items: list) -> list:
    items = list(items)
    rng.shuffle(items)
    return items
