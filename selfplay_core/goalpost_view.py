"""What a method may see of a goalpost: its question and the examples the question shows.

A real goalpost (a LiveCodeBench problem) ships no solution, and its tests are the verifier's;
so every prompt a goalpost reaches (GASP's teacher, SGS's Conjecturer, CompassPlay's reference
tasks, the Guide's target) is built from `goalpost_view`, which reads the problem's id and
statement and nothing else: not `metadata["reference"]`, not `tests`. The anchor's `code` is
empty, so the teacher prompt's solution section is empty, as it is on real data.

The sighted setting (the teacher shown the goalpost's reference program, and the judges that
score proposals against it: code relevance, gradient relevance, statement-deletion lemmas) is
a privileged ablation: `privileged_goalpost_view`, reached only through a method config's
`privileged_sighted_teacher: true`, and reported as `privileged=true` (MLflow tag, run summary).
"""

from __future__ import annotations

from typing import Iterable

from selfplay_core.problems import Problem
from selfplay_core.records import Anchor

# The config key that turns the privileged (sighted) ablation on, named where it is required.
PRIVILEGED_KEY = "method.privileged_sighted_teacher"


def goalpost_view(goalpost: Problem) -> Anchor:
    """The blind anchor of a goalpost: its statement (with whatever examples the statement
    itself shows) and no program. Reads `id` and `prompt` only, by construction."""
    return Anchor(goalpost.id, goalpost.prompt or "", "", goalpost_id=goalpost.id)


def privileged_goalpost_view(goalpost: Problem) -> Anchor:
    """The sighted anchor: the statement and the goalpost's reference program (what a real
    goalpost lacks). Only for the privileged ablation."""
    return Anchor(goalpost.id, goalpost.prompt or "", (goalpost.metadata or {}).get("reference", ""),
                  goalpost_id=goalpost.id)


def goalpost_anchors(goalposts: Iterable[Problem], privileged: bool = False) -> list[Anchor]:
    view = privileged_goalpost_view if privileged else goalpost_view
    return [view(g) for g in goalposts]


def privileged(method_config) -> bool:
    """Whether a run's method is the privileged (sighted) ablation; False for a method that has
    no such setting (it never shows a goalpost's solution)."""
    return bool(getattr(method_config, "privileged_sighted_teacher", False))


def privileged_tags(method_config) -> dict[str, str]:
    """The MLflow tags that mark a run of the privileged ablation (none for any other run)."""
    return {"privileged": "true"} if privileged(method_config) else {}


def require_privileged(method_config, what: str) -> None:
    """Raise the one config error for a judge that reads a goalpost's reference program in a
    run that is not the privileged ablation. `what`: the config key of that judge."""
    if not privileged(method_config):
        raise ValueError(f"{what} reads each goalpost's reference program, which a real goalpost "
                         f"does not have: it runs only as a privileged ablation; set "
                         f"{PRIVILEGED_KEY}=true with it (the run is then tagged privileged=true), "
                         f"or drop {what}")
