"""Options and helpers shared by subcommands."""

from __future__ import annotations

import argparse
import sys


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def add_sandbox_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sandbox")
    g.add_argument("--workers", type=int, default=None, help="parallel sandbox workers (default: CPU count)")
    g.add_argument("--backend", choices=["local", "docker"], default="local")
    g.add_argument("--require-isolation", action="store_true",
                   help="refuse to run if untrusted code cannot be isolated (no bubblewrap)")


def sandbox_config(args):
    from selfplay_core.sandbox import SandboxConfig

    kw = {"backend": args.backend, "require_isolation": args.require_isolation}
    if args.workers is not None:
        if args.workers < 1:
            raise CLIError("--workers must be at least 1")
        kw["workers"] = args.workers
    return SandboxConfig(**kw)


def progress_bar(total: int, desc: str, unit: str = "sample"):
    """Progress on stderr: a live bar on a terminal, plain lines elsewhere (selfplay_core.progress)."""
    from selfplay_core.progress import StepProgress

    return StepProgress(total, desc, unit)
