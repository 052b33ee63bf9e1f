"""Dynamic goalposts (the GASP paper's open problem): the teacher's goalposts move as the student
improves. A goalpost solved (pass@k > 0) at `solved_checks` consecutive goalpost checks is
retired — it no longer anchors lemmas — and the next candidate of the reserve is promoted in
its place. The reserve is ordered from the easiest unsolved candidate to the hardest (mining
orders it: frontier candidates by their best lemma's pass rate, then the candidates that had
no lemma in band), so each promotion is the next-hardest goalpost still unsolved.

Pure state and one pure update, so the rule has table tests; below them, the run's side that
GASP calls (`method.dynamic_goalposts`): the state lives in the run state's method_state (so a
resume continues it), each iteration's goalposts are the active ones after the latest goalpost
check is applied, and the counts are logged (`goalposts/dynamic/*`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from pydantic import Field

from selfplay_core.frozen import FrozenConfig


class DynamicGoalpostsConfig(FrozenConfig):
    """A goalpost solved (pass@k > 0 at eval.goalpost_k) at `solved_checks` consecutive goalpost
    checks stops anchoring lemmas and the next-hardest unsolved candidate (the mining's reserve)
    takes its place."""

    # Consecutive goalpost checks a goalpost must be solved at before it is replaced.
    solved_checks: int = Field(2, ge=1)


@dataclass
class DynamicState:
    active: list[str]
    reserve: list[str] = field(default_factory=list)
    streak: dict[str, int] = field(default_factory=dict)
    retired: list[dict] = field(default_factory=list)    # {"id", "at"}
    promoted: list[dict] = field(default_factory=list)   # {"id", "at", "replaces"}

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict | None) -> "DynamicState | None":
        return None if not d else cls(**d)


def update(state: DynamicState, solved: dict[str, bool], solved_checks: int, label: str,
           unsolved_now=None) -> tuple[DynamicState, list[str], list[str]]:
    """After one goalpost check: `solved` says, for active goalposts that were checked, whether
    pass@k > 0. Returns (new state, retired ids, promoted ids). A goalpost not checked keeps
    its streak. `unsolved_now(id) -> bool`, when given, is asked before a reserve candidate is
    promoted (a candidate the student already solves is skipped and retired with it)."""
    if solved_checks < 1:
        raise ValueError("solved_checks must be >= 1")
    streak = dict(state.streak)
    for gid in state.active:
        if gid in solved:
            streak[gid] = streak.get(gid, 0) + 1 if solved[gid] else 0
    out = [g for g in state.active if streak.get(g, 0) >= solved_checks]
    active = [g for g in state.active if g not in out]
    retired = state.retired + [{"id": g, "at": label} for g in out]
    reserve = list(state.reserve)
    promoted, new_ids = list(state.promoted), []
    taken = set(active) | {r["id"] for r in retired}
    for g in out:
        while reserve:
            cand = reserve.pop(0)
            if cand in taken:
                continue
            taken.add(cand)
            if unsolved_now is not None and not unsolved_now(cand):
                retired.append({"id": cand, "at": label, "skipped": True})
                continue
            active.append(cand)
            promoted.append({"id": cand, "at": label, "replaces": g})
            new_ids.append(cand)
            streak[cand] = 0
            break
    for g in out:
        streak.pop(g, None)
    return DynamicState(active, reserve, streak, retired, promoted), out, new_ids


# ---- the run's side (GASP's `method.dynamic_goalposts`) ------------------------------------------

def start(ctx) -> None:
    """The first state, from the run's goalposts and the world's reserve (kept on resume)."""
    ms = ctx.state.method_state
    if "dynamic_goalposts" not in ms:
        ms["dynamic_goalposts"] = DynamicState(active=[g.id for g in ctx.goalposts],
                                               reserve=[p.id for p in ctx.world.goalpost_reserve]).to_json()
        ms["dynamic_checks_seen"] = 1   # the starting model's row


def active_goalposts(ctx, config: DynamicGoalpostsConfig) -> list:
    """The active goalposts (Problems) after applying the latest goalpost check to the state."""
    from selfplay_core import stages as S

    ms = ctx.state.method_state
    st = DynamicState.from_json(ms["dynamic_goalposts"])
    rows, labels = ctx.state.goalpost_rows, ctx.state.goalpost_labels
    pool = {p.id: p for p in ctx.world.goalpost_pool}
    if len(rows) > ms["dynamic_checks_seen"]:
        row, label = rows[-1], labels[-1]
        solved = {g: row[j] > 0 for j, g in enumerate(ctx.state.goalpost_ids) if g in st.active}
        extra = [g for g in st.active if g not in solved]
        if extra:  # promoted goalposts are outside the tracked set: check them here
            res = S.solve(ctx.engine, ctx.executor, [pool[g] for g in extra],
                          ctx.config.eval.goalpost_k, S.student_sampling(ctx))
            solved.update({g: r.c > 0 for g, r in zip(extra, res)})
        st, _, _ = update(st, solved, config.solved_checks, label)
        ms["dynamic_goalposts"] = st.to_json()
        ms["dynamic_checks_seen"] = len(rows)
    return [pool[g] for g in st.active if g in pool]


def log_counts(ctx, log) -> None:
    """goalposts/dynamic/{active,retired,promoted}, when the run has dynamic goalposts."""
    ms = ctx.state.method_state.get("dynamic_goalposts")
    if ms:
        log.add(**{"goalposts/dynamic/active": len(ms["active"]),
                   "goalposts/dynamic/retired": len(ms["retired"]),
                   "goalposts/dynamic/promoted": len(ms["promoted"])})
