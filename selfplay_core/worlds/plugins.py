"""The world plug-ins: the one place that names a world package outside the generic code.

Each entry is a module that registers its world(s) (and the methods that need its oracle)
when imported. They are imported by name, at run time, when `selfplay_core.worlds` is first
imported, so no generic module imports a plug-in's package (tests/test_import_graph.py holds
every other module to that). Adding a world that lives in its own package: its module here.
"""

from __future__ import annotations

import importlib

WORLD_PLUGINS: tuple[str, ...] = (
    "selfplay_core.toyworld.world",   # the synthetic toy world, its oracle and its oracle arms
)

# The world of a run config that names none (the embedded default, configs/tiny-cpu.yaml).
DEFAULT_WORLD = "toy"


def load_plugins() -> None:
    for module in WORLD_PLUGINS:
        importlib.import_module(module)
