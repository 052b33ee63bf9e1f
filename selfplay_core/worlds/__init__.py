"""Worlds: where a run's tasks come from, one registered `World` each (see `worlds.base`).

    lcb   the real-data world: LiveCodeBench goalposts and training split, LCB window +
          HumanEval+ / MBPP+ evaluation (worlds/lcb.py; no oracle)
    toy   the synthetic toy world with its tiny model and its oracle, a plug-in
          (selfplay_core.toyworld.world, loaded through worlds/plugins.py)

A run config's `world:` section is one of the registered worlds' config classes, chosen by its
`name`.
"""

from selfplay_core.worlds import lcb  # noqa: F401  (registers the real-data world)
from selfplay_core.worlds.base import (Fits, SplitInfo, World, WorldConfig, build_world, register,
                                       registered, world_class)
from selfplay_core.worlds.plugins import DEFAULT_WORLD, load_plugins

load_plugins()

__all__ = ["DEFAULT_WORLD", "Fits", "SplitInfo", "World", "WorldConfig", "build_world", "register",
           "registered", "world_class"]
