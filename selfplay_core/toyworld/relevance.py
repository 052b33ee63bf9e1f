"""How relevant a run's proposals were to its goalposts, read from the run's lineage (toy world
only; a diagnostic, never a reward).

Fidelity says a proposal's question describes its code; it does not say the proposal is near
its goalpost. A faithful lemma may be any easy task. Here a proposal is a *true variant* when
it is faithful and exactly one step from its parent in the asked direction (a lemma one step
easier than its goalpost, a lift one step harder than its lemma), and a lift is *on the path*
when it is a true variant of a lemma that is itself a true variant of the goalpost — the chain
the oracle curriculum proposes by construction.

`lineage_relevance(entries, goalposts)`: `entries` are the lineage records a run keeps
(`RunState.lineage`: id, kind, parent, question, accepted, faithful, trained), `goalposts` maps a
goalpost id to its toy Task; lemma and lift parents inside the lineage are looked up there.
`question_variant` is the same check for one proposal in the loop (the toy oracle's `variant`,
logged as `teacher/<kind>/true_variant`).
"""

from __future__ import annotations

from typing import Iterable, Mapping

from selfplay_core.toyworld.fidelity import parse_description
from selfplay_core.toyworld.role_quality import is_true_variant
from selfplay_core.toyworld.tasks import Task

DIRECTION = {"lemma": "easier", "lift": "harder", "medium": "easier", "hard": "easier"}


def _share(n: int, d: int) -> float | None:
    return n / d if d else None


def lineage_relevance(entries: Iterable[Mapping], goalposts: Mapping[str, Task]) -> dict[str, dict]:
    """Per kind: accepted proposals, and of those the faithful / true-variant shares (lifts:
    also on the path), the mean depth of the faithful ones, the same shares among those the
    student trained on. Kinds without a direction (e.g. AZR's) are left out."""
    entries = list(entries)
    by_id = {e["id"]: e for e in entries}
    true_of: dict[str, bool] = {}
    for e in entries:   # every verdict first: a lift's "on the path" reads its lemma's
        if e["kind"] in DIRECTION and e.get("accepted"):
            true_of[e["id"]] = _true_variant(e, by_id, goalposts)
    out: dict[str, dict] = {}
    for kind in [k for k in DIRECTION if any(e["kind"] == k for e in entries)]:
        acc = [e for e in entries if e["kind"] == kind and e.get("accepted")]
        trained = [e for e in acc if e.get("trained")]
        faithful = [e for e in acc if e.get("faithful")]
        depths = [t.depth for t in (parse_description(e["question"]) for e in faithful) if t is not None]
        row = {"accepted": len(acc), "trained": len(trained),
               "faithful": _share(len(faithful), len(acc)),
               "true_variant": _share(sum(true_of[e["id"]] for e in acc), len(acc)),
               "trained_true_variant": _share(sum(true_of[e["id"]] for e in trained), len(trained)),
               "faithful_depth": sum(depths) / len(depths) if depths else None}
        if kind == "lift":
            on = [true_of[e["id"]] and true_of.get(e["parent"], False) for e in acc]
            row["on_path"] = _share(sum(on), len(acc))
        out[kind] = row
    return out


def question_variant(parent_question: str, question: str, direction: str) -> bool | None:
    """The loop's per-proposal check (ToyOracle.variant, RunContext.oracle): the question describes a task one
    step from its parent's in `direction` (the caller checks fidelity: the code does what the
    question says). None when the parent is no toy task description (a SPICE document, AZR's
    seed): there is nothing to be a variant of."""
    parent = parse_description(parent_question)
    return None if parent is None else _variant_of(parent, question, direction)


def _variant_of(parent: Task, question: str, direction: str) -> bool:
    proposal = parse_description(question)
    return proposal is not None and is_true_variant(parent, proposal, direction)


def _true_variant(e: Mapping, by_id: Mapping, goalposts: Mapping[str, Task]) -> bool:
    if not e.get("faithful"):
        return False
    parent = goalposts.get(e["parent"])
    if parent is None and e["parent"] in by_id:
        parent = parse_description(by_id[e["parent"]]["question"])
    return parent is not None and _variant_of(parent, e["question"], DIRECTION[e["kind"]])
