"""Self-play methods: one file each, registered by name (see `methods.base` for the interface).

    gasp        goalposts -> lemma -> lift (GASP); `gasp+rlvr` adds real tasks to the student batch;
                optional judges of each proposal (`judges/`)
    gasp-edit   GASP whose lemma programs are the executor's statement deletions (privileged)
    azr         unguided deduction / abduction / induction (Absolute Zero)
    rlvr        real training tasks only
    sgs         Self-Guided Self-Play: Conjecturer on unsolved targets, frozen Guide, REINFORCE½
    compassplay proposer rewarded by gradient alignment with reference tasks (CompassPlay)
    r-zero      a Challenger without reference programs; the Solver's majority vote verifies (R-Zero)
    spice       a document the solver never sees grounds each task (SPICE; SCOPE's rubric path)
    star        real tasks; correct programs and hinted rationalizations, fine-tuned on (STaR)

A world may register methods that need its oracle: the toy world's oracle arms
`oracle-curriculum` and `oracle-filter` (GASP's config; registered when the world plug-ins load,
see `selfplay_core.worlds`).

A run config's `method:` section is one of the registered methods' config classes, chosen by
its `name`. Adding a method: a file here with its `MethodConfig` subclass and its `@register`ed
`Method` subclass, and its import below.
"""

from selfplay_core.methods import azr, compassplay, edited_lemmas, gasp, rlvr, rzero, sgs, spice, star  # noqa: F401  (each registers its method)
from selfplay_core.methods.base import Method, MethodConfig, Round, method_for, register, registered

__all__ = ["Method", "MethodConfig", "Round", "method_for", "register", "registered"]
