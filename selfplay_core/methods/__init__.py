"""One small file per method. Each fills the loop's two slots — where a task comes from and
who verifies it — by composing the shared stages in `selfplay_core.stages`.

A method module exposes `run_iteration(ctx, log, call)`, where `call(name, fn, *args)` runs one
stage (directly, or as a Prefect task inside the flow).
"""

from importlib import import_module

METHODS = {"gasp": "gasp", "gasp+rlvr": "gasp", "azr": "azr", "rlvr": "rlvr"}


def get_method(name: str):
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; one of {sorted(METHODS)}")
    return import_module(f"selfplay_core.methods.{METHODS[name]}")
