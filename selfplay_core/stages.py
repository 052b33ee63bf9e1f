"""The stages an iteration is made of, shared by every method: sampling settings, the proposal
gate, pass-rate estimates, proposer scoring, the buffer, the student batch (self-proposed, replayed
and real tasks), the update, held-out evaluation and goalpost tracking.

Each stage is a plain function of the run context (`run_context.RunContext`) so Prefect tasks
can wrap them one to one and tests can call them directly. None of them knows which method runs:
what differs between methods comes in as an argument (a reward, the task kinds to replay, the
method whose `rollouts` and `advantages` hooks the update calls); see `methods.base`.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Protocol, Sequence

from selfplay_core import rewards
from selfplay_core.buffers import BufferItem
from selfplay_core.engines.base import SamplingParams, takes_seeds
from selfplay_core.evaluation.passk import mean_pass_at_k_or_nan, pass_at_k
from selfplay_core.problems import Problem, TestCase
from selfplay_core.proposals import ALLOWED_IMPORTS, probe_inputs  # the one allow-list
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.rl.advantages import Scored
from selfplay_core.rl.rollout import Rollout
from selfplay_core.roles.common import Rejection, signature_of
from selfplay_core.roles.teacher import STOP as TEACHER_STOP
from selfplay_core.roles.teacher import parse_teacher, teacher_prompt
from selfplay_core.solve import SolveResult, solve


def teacher_sampling(ctx, stop: tuple[str, ...] = TEACHER_STOP) -> SamplingParams:
    e = ctx.config.engine
    temp = e.temperature if e.teacher_temperature is None else e.teacher_temperature
    return SamplingParams(temperature=temp, top_p=e.top_p,
                          max_new_tokens=e.max_new_tokens_teacher, stop=stop,
                          seed=ctx.next_seed())


def student_sampling(ctx, temperature: float | None = None, stop: tuple[str, ...] = ()) -> SamplingParams:
    e = ctx.config.engine
    return SamplingParams(temperature=e.temperature if temperature is None else temperature,
                          top_p=e.top_p, max_new_tokens=e.max_new_tokens_student, stop=stop,
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
    groups = ctx.proposer.generate([p for _, _, p in plan], n, sp)
    out = []
    for (a, axis, prompt), comps in zip(plan, groups):
        for c in comps:
            out.append(Proposal(kind, a, axis, direction, prompt, c,
                                id=f"it{ctx.state.iteration}/{kind}/{ctx.next_id()}",
                                temperature=sp.temperature))
    return out


# ---- validate ----------------------------------------------------------------------------------

def check_references(ctx, items: list[tuple[Problem, str]], probes: int = 3
                     ) -> list[tuple[list | None, str | None]]:
    """The gate for reference programs, in the sandbox (issue 11, class 5): imports outside
    ALLOWED_IMPORTS refused at run time, sandbox.gate_bits + 1 runs in fresh processes with
    different hash seeds and address layouts, one with a broken clock, on the proposed inputs plus up to `probes` other items' inputs
    of the same arity. (outputs, None) when accepted, else (None, reason): banned_import,
    reference_timeout, reference_error, nondeterministic, harness_error."""
    if not items:
        return []
    checks = ctx.executor.check_references(items, allowed_imports=ALLOWED_IMPORTS,
                                           extra_inputs=probe_inputs([p for p, _ in items], probes))
    return [(c.outputs, c.rejection) for c in checks]


def rejector(reasons: dict[str, int]):
    """reject(proposal, reason): marks it rejected and counts the reason."""
    def reject(p: Proposal, reason: str) -> None:
        p.rejection = reason
        reasons[reason] = reasons.get(reason, 0) + 1
    return reject


def log_acceptance(log: IterationLog, kind: str, proposals: list[Proposal], reasons: dict[str, int]) -> None:
    n = len(proposals)
    acc = sum(p.accepted for p in proposals)
    log.add(**{f"teacher/{kind}/proposals": n, f"teacher/{kind}/accepted": acc,
               f"teacher/{kind}/acceptance": acc / n if n else 0.0})
    for r, c in reasons.items():
        log.metrics[f"rejections/{kind}/{r}"] = log.metrics.get(f"rejections/{kind}/{r}", 0) + c


def validate(ctx, proposals: list[Proposal], log: IterationLog) -> None:
    """Parse, then gate: the reference, run in the sandbox (`check_references`: allowed imports
    at run time, in time, identical outputs in two processes), enough distinct outputs, not a
    near-duplicate of the buffers or of a batch-mate, not an evaluation item. Rejections
    counted by reason (a `harness_error` is not the teacher's: no reward, no rollout)."""
    t = ctx.config.teacher
    reasons: dict[str, int] = {}
    reject = rejector(reasons)

    todo = []
    for p in proposals:
        p.parsed = parse_teacher(p.text, min_inputs=t.min_inputs, max_inputs=t.max_inputs)
        if isinstance(p.parsed, Rejection):
            reject(p, f"parse_{p.parsed.reason}")
            continue
        prob = Problem(id=p.id, kind="call", entry_point="f", prompt=p.parsed.question,
                       tests=[TestCase(args=list(a), has_expected=False) for a in p.parsed.inputs],
                       time_limit_s=1.0, memory_limit_mb=256,
                       metadata={"reference": p.parsed.code,
                                 "signature": signature_of(p.parsed.code, "f"),
                                 "kind": p.kind, "axis": p.axis})
        todo.append((p, prob))
    gate_references(ctx, todo, reject)
    kind = proposals[0].kind if proposals else "none"
    log_acceptance(log, kind, proposals, reasons)


def gate_references(ctx, todo: list[tuple[Proposal, Problem]], reject, *, question_only: bool = False,
                    kinds: Sequence[str] | None = None) -> None:
    """The post-parse gate every proposer shares: the reference program (`p.parsed.code`) run in
    the sandbox (`check_references`), enough distinct outputs, not a near-duplicate of the
    buffers (of `kinds`, all when None) or of a batch-mate, not an evaluation item. An accepted
    proposal gets `p.problem` with the reference's outputs as the expected values.
    `question_only`: compare questions alone (the program is a fixed document's, so it says
    nothing about novelty); the text compared is then kept for the buffer's later checks."""
    t = ctx.config.teacher
    runs = check_references(ctx, [(prob, p.parsed.code) for p, prob in todo])
    batch_texts: list[str] = []
    for (p, prob), (outputs, bad) in zip(todo, runs):
        if bad:
            reject(p, bad)
            continue
        if len({repr(o) for o in outputs}) < t.require_distinct_outputs:
            reject(p, "degenerate_outputs")
            continue
        text = p.parsed.question if question_only else f"{p.parsed.question}\n{p.parsed.code}"
        if t.rejection_sampling and ctx.buffers.is_near_duplicate(text, batch_texts, kinds=kinds)[0]:
            reject(p, "near_duplicate")
            continue
        if ctx.contamination.is_near_duplicate(text)[0] or overlaps_eval(ctx, p.parsed.question):
            reject(p, "eval_contamination")
            continue
        batch_texts.append(text)
        prob.tests = [TestCase(args=tc.args, expected=o) for tc, o in zip(prob.tests, outputs)]
        if question_only:
            prob.metadata["dedupe_text"] = text
        p.problem = prob


def overlaps_eval(ctx, question: str) -> bool:
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
        if not has_pass_rate(p, r):
            continue
        p.solve = r
        p.pass_rate = r.c / r.n


def has_pass_rate(p: Proposal, r: SolveResult) -> bool:
    """False when every sample was a harness error: p is unknown, so the proposal drops out
    (no reward, no rollout, not buffered) instead of scoring the sandbox's failure."""
    if r.n:
        return True
    p.problem, p.rejection, p.solve = None, "harness_error", None
    return False


class ProposerReward(Protocol):
    """A proposer's reward, computed over the accepted proposals of one batch (so a reward may
    normalise over the batch); `metrics` adds its own diagnostics (e.g. the in-band share)."""

    def __call__(self, ctx, accepted: list[Proposal]) -> list[float]: ...

    def metrics(self, accepted: list[Proposal]) -> dict[str, float]: ...


def score(ctx, proposals: list[Proposal], reward: ProposerReward, log: IterationLog) -> None:
    """Each proposal's reward: `reward` over the accepted ones, the format or invalid penalty
    (teacher.format_penalty / invalid_penalty) for the rest; none for a proposal the sandbox
    could not judge (rejection harness_error): it is not the proposer's doing."""
    t = ctx.config.teacher
    acc = [p for p in proposals if p.accepted]
    given = list(reward(ctx, acc)) if acc else []
    if len(given) != len(acc):
        raise ValueError(f"{type(reward).__name__} gave {len(given)} rewards for {len(acc)} "
                         "accepted proposals")
    values = iter(given)
    for p in proposals:
        if p.accepted:
            p.reward = next(values)
        elif p.rejection == "harness_error":
            p.reward = None
        else:
            p.reward = rewards.invalid_proposal(parsed=not isinstance(p.parsed, Rejection),
                                                format_fail=t.format_penalty,
                                                invalid=t.invalid_penalty)
    kind = proposals[0].kind if proposals else "none"
    judged = [p for p in proposals if p.reward is not None]
    if judged:
        log.add(**{f"teacher/{kind}/reward": sum(p.reward for p in judged) / len(judged)})
    if acc:
        log.add(**{f"teacher/{kind}/pass_rate": sum(p.pass_rate for p in acc) / len(acc)})
        log.add(**{f"teacher/{kind}/{k}": v for k, v in reward.metrics(acc).items()})


def fidelity(ctx, proposals: list[Proposal], log: IterationLog) -> None:
    """A world with an oracle (the toy world): share of accepted proposals whose text describes their code, and share
    that are also true one-step variants of their anchor (`ctx.oracle.variant`; over the proposals
    whose anchor is a task the oracle knows: a faithful task far from its goalpost is no curriculum)."""
    acc = [p for p in proposals if p.accepted]
    if not acc or ctx.oracle is None:
        return
    res = ctx.oracle.fidelity(ctx.executor, [(p.parsed.question, p.parsed.code, p.parsed.inputs) for p in acc])
    for p, f in zip(acc, res):
        p.faithful = f.faithful
    kind = acc[0].kind
    log.add(**{f"teacher/{kind}/fidelity": sum(f.faithful for f in res) / len(res)})
    verdicts = [(p.faithful, ctx.oracle.variant(p.anchor.question, p.parsed.question, p.direction))
                for p in acc]
    judged = [bool(f and v) for f, v in verdicts if v is not None]
    if judged:
        log.add(**{f"teacher/{kind}/true_variant": sum(judged) / len(judged)})


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


def replayable(b) -> bool:
    """A buffered task can be posed again: it has tests with outputs and a reference program,
    which gives the student's function header (a task proposed without one, e.g. R-Zero's
    pseudo-labelled tasks, has no header to pose it with)."""
    return bool(b.inputs and b.outputs) and signature_of(b.code, "f") is not None


def buffered_problem(b) -> Problem:
    """A buffered task as a Problem to solve afresh."""
    return Problem(id=b.id, kind="call", entry_point="f", prompt=b.question,
                   tests=[TestCase(args=list(a), expected=o) for a, o in zip(b.inputs, b.outputs)],
                   time_limit_s=1.0, memory_limit_mb=256,
                   metadata={"reference": b.code, "signature": signature_of(b.code, "f"),
                             "kind": b.kind})


def solve_replay_tasks(ctx, kinds: Sequence[str], log: IterationLog) -> list[tuple[str, SolveResult]]:
    """Earlier accepted proposals of the given kinds (p in student.train_band when proposed),
    solved afresh; those whose new p is still in the band join the student batch under their
    own kind."""
    st = ctx.config.student
    k = st.replay_tasks_per_iteration
    if k == 0:
        return []
    lo, hi = st.train_band
    pool = [b for b in ctx.buffers if b.kind in kinds and b.iteration < ctx.state.iteration
            and b.pass_rate is not None and lo <= b.pass_rate <= hi and replayable(b)]
    if not pool:
        return []
    picked = ctx.rng.sample(pool, min(k, len(pool)))
    probs = [buffered_problem(b) for b in picked]
    res = solve(ctx.engine, ctx.executor, probs, st.samples_per_task, student_sampling(ctx))
    kept = [(b.kind, r) for b, r in zip(picked, res) if r.n and lo <= r.c / r.n <= hi]
    log.add(**{"student/replay/pass_rate": sum(r.c for r in res) / max(1, sum(r.n for r in res)),
               "student/replay/tasks": len(kept)})
    return kept


def fill_student_batch(ctx, student: list[tuple[str, SolveResult]], log: IterationLog
                       ) -> list[tuple[str, SolveResult]]:
    """Top the batch up to student.batch_size / samples_per_task tasks (student.fill): with
    earlier iterations' accepted proposals, solved afresh, that the student neither always nor
    never solves ("replay"), or with real training tasks ("real")."""
    st = ctx.config.student
    need = st.batch_size // st.samples_per_task - len(student)
    log.add(**{"student/batch/own_tasks": len(student)})
    if st.fill == "none" or need <= 0:
        return student
    if st.fill == "real":
        res = solve(ctx.engine, ctx.executor, ctx.next_real_tasks(need), st.samples_per_task,
                    student_sampling(ctx))
        log.add(**{"student/fill/tasks": len(res)})
        return student + [("real", r) for r in res]
    have = {r.problem.id for _, r in student}
    pool = [b for b in ctx.buffers if b.iteration < ctx.state.iteration and replayable(b)
            and b.id not in have and b.kind != "eval"]
    if not pool:
        log.add(**{"student/fill/tasks": 0})
        return student
    picked = ctx.rng.sample(pool, min(2 * need, len(pool)))
    probs = [buffered_problem(b) for b in picked]
    res = solve(ctx.engine, ctx.executor, probs, st.samples_per_task, student_sampling(ctx))
    kept = [(b.kind, r) for b, r in zip(picked, res) if 0 < r.c < r.n][:need]
    log.add(**{"student/fill/tasks": len(kept),
               "student/fill/pass_rate": sum(r.c for r in res) / max(1, sum(r.n for r in res))})
    return student + kept


# ---- update ------------------------------------------------------------------------------------

def _rollout(c, reward: float, role: str, kind: str, group: str, temperature: float,
             passed: bool | None = None) -> Rollout | None:
    if not c.token_ids or c.logprobs is None or c.prompt_token_ids is None:
        return None
    return Rollout(list(c.prompt_token_ids), list(c.token_ids), list(c.logprobs), 0.0, role,
                   {"kind": kind, "group": group, "reward": reward, "passed": passed},
                   temperature=temperature)


def solution_mask(tokenizer, token_ids: Sequence[int], header: str = "### Solution") -> list[float]:
    """1 per completion token, 0 for the tokens of the section under `header` (up to the next
    "### " header): the proposal's program, left out of the teacher's loss when
    teacher.train_solution is false."""
    text = tokenizer.decode(list(token_ids), skip_special_tokens=False)
    start = text.find(header)
    if start == -1:
        return [1.0] * len(token_ids)
    body = text.find("\n", start) + 1 or len(text)
    end = text.find("\n### ", body)
    end = len(text) if end == -1 else end + 1
    mask, pos = [], 0
    for i in range(len(token_ids)):
        nxt = len(tokenizer.decode(list(token_ids[:i + 1]), skip_special_tokens=False))
        mask.append(0.0 if pos < end and nxt > body else 1.0)
        pos = nxt
    return mask


def rollouts(ctx, teacher: list[Proposal], student: list[tuple[str, SolveResult]]) -> list[Rollout]:
    """Every proposal's completion (role teacher, its reward; none with teacher.train false)
    and the student's samples (role student, 1 if passed), the student's capped at
    student.batch_size in whole groups."""
    rolls: list[Rollout] = []
    for p in teacher if ctx.config.teacher.train else ():
        if p.reward is None:  # not judged (harness error): no rollout
            continue
        r = _rollout(p.completion, p.reward, "teacher", p.kind, p.id, p.temperature)
        if r:
            if not ctx.config.teacher.train_solution:
                r.loss_mask = solution_mask(ctx.proposer_tokenizer, r.completion_ids)
            rolls.append(r)
    cap = ctx.config.student.batch_size
    groups = []
    for kind, res in student:
        group = [_rollout(c, rewards.student(ok), "student", kind, res.problem.id,
                          ctx.config.engine.temperature, passed=bool(ok))
                 for c, ok in res.scored()]   # samples that hit a harness error yield no rollout
        groups.append([r for r in group if r])
    student_rolls = [r for g in groups for r in g]
    if len(student_rolls) > cap:  # keep whole groups (a task's samples; not always n of them)
        ctx.rng.shuffle(groups)
        student_rolls, room = [], cap
        for g in groups:
            if len(g) <= room:
                student_rolls += g
                room -= len(g)
    return rolls + student_rolls


def scored(r: Rollout) -> Scored:
    """What an advantage estimator sees of a rollout."""
    return Scored(r.meta["reward"], r.role, r.meta["kind"], r.meta["group"], r.meta.get("passed"))


def update(ctx, method, teacher: list[Proposal], student: list[tuple[str, SolveResult]],
           log: IterationLog) -> dict:
    """The method's rollouts and advantages (its `rollouts` and `advantages` hooks), then
    updates_per_iteration learner epochs on those with a nonzero advantage; the engine then
    receives the new weights (in place for hf, pushed to the server for vllm). With
    overlap_generation the epochs run during the next iteration (overlap.py)."""
    if ctx.config.overlap_generation:
        return _overlapped_update(ctx, method, teacher, student, log)
    signal = teacher_update(ctx, update_batch(ctx, method, teacher, student, log), log)
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


def _overlapped_update(ctx, method, teacher, student, log: IterationLog) -> dict:
    """Wait for the previous iteration's update (running since this iteration began), push its
    weights, then keep this iteration's rollouts for the next one; the last iteration updates
    in line."""
    t0 = time.perf_counter()
    metrics = ctx.background.join_and_push()
    signal = teacher_update(ctx, update_batch(ctx, method, teacher, student, log), log)
    if signal and ctx.state.iteration + 1 >= ctx.config.iterations:
        with ctx.learner_turn():
            metrics.update(ctx.learner.update(signal, epochs=ctx.config.updates_per_iteration))
        metrics.update(ctx.push_weights())
    elif signal:
        ctx.background.defer(signal)
    metrics["time/update_s"] = time.perf_counter() - t0
    log.add(**metrics)
    return metrics


def teacher_update(ctx, signal: list[Rollout], log: IterationLog) -> list[Rollout]:
    """A separate teacher that trains (teacher.model with teacher.train) takes the teacher's
    rollouts in its own learner, in line (its tokens are its own model's, never the policy's),
    and its engine gets the new weights; returns the rollouts left for the policy's learner.
    Without one, the signal passes through whole."""
    if ctx.teacher_learner is None:
        return signal
    mine = [r for r in signal if r.role == "teacher"]
    if mine:
        t0 = time.perf_counter()
        metrics = ctx.teacher_learner.update(mine, epochs=ctx.config.updates_per_iteration)
        metrics.update(ctx.push_teacher_weights())
        log.add(**{"teacher_learner/" + k.removeprefix("learner/"): v for k, v in metrics.items()},
                **{"time/teacher_update_s": time.perf_counter() - t0})
    return [r for r in signal if r.role != "teacher"]


def update_batch(ctx, method, teacher: list[Proposal], student: list[tuple[str, SolveResult]],
                 log: IterationLog) -> list[Rollout]:
    """The rollouts the learner trains on: the method's, with its advantages, those with a zero
    advantage dropped."""
    rolls = method.rollouts(ctx, teacher, student)
    if not rolls:
        return []
    for r, a in zip(rolls, method.advantages(ctx, rolls), strict=True):
        r.advantage = a
    signal = [r for r in rolls if r.advantage != 0.0]
    log.add(**{"learner/signal_share": len(signal) / len(rolls),
               "learner/teacher_rollouts": sum(r.role == "teacher" for r in rolls),
               "learner/student_rollouts": sum(r.role == "student" for r in rolls),
               # e.g. REINFORCE½: the correct student rollouts on tasks solved at most half the time
               "learner/student_signal": sum(r.role == "student" for r in signal)})
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
    # A problem with fewer than k judged samples (harness errors excluded) is left out of pass@k.
    for g, counts in sorted(groups.items()):
        for k in e.ks:
            out[f"eval/{g}/pass@{k}"] = mean_pass_at_k_or_nan([x for x in counts if x[0] >= k], k)
    for k in e.ks:
        out[f"eval/all/pass@{k}"] = mean_pass_at_k_or_nan([(r.n, r.c) for r in res if r.n >= k], k)
    log.add(**out)
    return out


def goalpost_checks(cfg) -> int:
    """How many goalpost checks a run makes: at step 0, every eval.goalpost_every, at the end."""
    e = cfg.eval
    return 1 + sum(1 for s in range(1, cfg.iterations + 1) if s % e.goalpost_every == 0 or s == cfg.iterations)


def evaluate_full(ctx, log: IterationLog) -> dict:
    """The whole held-out set (not the eval.max_problems subset) at step 0 and at the end, for
    the verdict of the end against the start: eval_full/... metrics, per-problem counts in the
    state, and at the end verdict/pass@k_{diff,se} (evaluation/verdict.py)."""
    e = ctx.config.eval
    probs = ctx.world.heldout_problems
    # The same seed at the start and at the end (common random numbers: an unchanged policy
    # draws the same samples); the run's seed stream still advances as it always did, so every
    # other stage's seeds stay what they were.
    sp = replace(student_sampling(ctx), seed=verdict_seed(ctx.config.seed))
    res = solve(verdict_engine(ctx), ctx.executor, probs, e.verdict_samples, sp)
    counts = {r.problem.id: [r.n, r.c] for r in res}
    st = ctx.state
    out = {f"eval_full/all/pass@{k}": mean_pass_at_k_or_nan([(r.n, r.c) for r in res], k) for k in e.ks}
    if not st.eval_start:
        st.eval_start = counts
    else:
        st.eval_end = counts
        for v in verdicts(st.eval_start, counts, e.ks):
            k = v.metric.rsplit("@", 1)[1]
            out[f"verdict/pass@{k}_diff"] = v.diff
            out[f"verdict/pass@{k}_se"] = v.se
            out[f"verdict/pass@{k}_not_worse"] = float(v.not_worse)
    log.add(**out)
    return out


def verdict_engine(ctx):
    """The run's engine where a seed makes its draws reproducible; otherwise (vLLM's CPU build)
    an HF engine over a copy of the learner's current weights, so that the start and the end are
    still drawn with common random numbers."""
    if takes_seeds(ctx.engine) or ctx.learner is None:
        return ctx.engine
    import copy

    from selfplay_core.engines.hf import HFEngine

    return HFEngine(copy.deepcopy(ctx.learner.unwrapped), ctx.tokenizer,
                    batch_size=ctx.config.engine.batch_size)


def verdict_seed(run_seed: int) -> int:
    """The sampling seed of both verdict evaluations of a run: fixed by the run's seed, far past
    what `next_seed` hands out in a run (run_seed * 1_000_003 + a counter of calls)."""
    return run_seed * 1_000_003 + 999_983


def verdicts(start: dict, end: dict, ks=None) -> list:
    """Paired verdicts of `end` against `start` for each k (default: 1 and the samples drawn)."""
    from selfplay_core.evaluation.verdict import compare

    n = min(min(v[0] for v in start.values()), min(v[0] for v in end.values()))
    ks = ks or (1, n)
    return [compare({p: tuple(v) for p, v in start.items()}, {p: tuple(v) for p, v in end.items()},
                    k, metric=f"held-out pass@{k}") for k in sorted(set(ks)) if k <= n]


def track_goalposts(ctx, label: str, log: IterationLog) -> list[float]:
    """pass@k per goalpost for the current weights: one row of the checkpoint x goalpost matrix.
    The first check (the starting model) draws eval.goalpost_floor_n samples: its row uses the
    first k of them like every later row, and all of them estimate the start model's floor —
    goalposts/floor, the number of goalposts k samples of the start model are expected to hit,
    and goalposts/floor_union, the same over the run's checks (goalpost_checks x k samples,
    at most floor_n) — logged beside goalposts/solved and goalposts/solved_union."""
    e = ctx.config.eval
    k = e.goalpost_k
    gps = ctx.goalposts
    if not gps:
        return []
    first = not ctx.state.goalpost_rows
    n = max(k, e.goalpost_floor_n) if first else k
    res = solve(ctx.engine, ctx.executor, gps, n, student_sampling(ctx))
    # pass rate of the first k judged samples (a harness error is no sample); solved: any pass
    row = [sum(r.passed[:k]) / len(r.passed[:k]) if r.passed else 0.0 for r in res]
    if first and e.goalpost_floor_n:
        m = min(n, goalpost_checks(ctx.config) * k)
        ctx.state.goalpost_floor = {
            "floor": sum(pass_at_k(r.n, r.c, k) for r in res if r.n >= k),
            "floor_union": sum(pass_at_k(r.n, r.c, m) for r in res if r.n >= m),
            "n": n, "union_k": m, "hits_at_n": sum(r.c > 0 for r in res)}
    ctx.state.goalpost_rows.append(row)
    ctx.state.goalpost_labels.append(label)
    solved = sum(1 for v in row if v > 0)
    union = sum(1 for j in range(len(gps)) if any(r[j] > 0 for r in ctx.state.goalpost_rows))
    log.add(**{"goalposts/solved": solved, "goalposts/solved_union": union,
               "goalposts/total": len(gps)})
    floor = ctx.state.goalpost_floor
    if floor:
        log.add(**{"goalposts/floor": floor["floor"], "goalposts/floor_union": floor["floor_union"]})
    return row


def entropy_of(proposals: Sequence[Proposal]) -> float:
    """Mean negative logprob per sampled token (a cheap entropy estimate of the sampler)."""
    lps = [lp for p in proposals for lp in (p.completion.logprobs or [])]
    return -sum(lps) / len(lps) if lps else float("nan")


def shuffled(rng: random.Random, items: list) -> list:
    items = list(items)
    rng.shuffle(items)
    return items
