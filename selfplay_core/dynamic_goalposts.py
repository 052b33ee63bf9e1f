"""Dynamic goalposts (the GASP paper's open problem): the teacher's goalposts move as the student
improves. A goalpost solved (pass@k > 0) at `solved_checks` consecutive goalpost checks is
retired — it no longer anchors lemmas — and the next candidate of the reserve is promoted in
its place. The reserve is ordered from the easiest unsolved candidate to the hardest (mining
orders it: frontier candidates by their best lemma's pass rate, then the candidates that had
no lemma in band), so each promotion is the next-hardest goalpost still unsolved.

Pure state and one pure update, so the rule has table tests; the loop saves the state in the
run state and logs retirements and promotions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


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
