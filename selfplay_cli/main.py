from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules of this package; each defines register(subparsers).
COMMANDS = ["run", "compare", "study", "verify", "evaluate", "convert", "data", "bootstrap", "vllm_serve",
            "deploy", "serve"]


# Defined in _common (not here): `python -m selfplay_cli.main` loads this file as __main__, and a
# class defined here would then exist twice, so subcommands' errors would escape the handler.
from selfplay_cli._common import CLIError  # noqa: E402,F401


class _Version(argparse.Action):
    """--version, read from the installed package's metadata only when asked (startup stays lean)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = version("selfplay")
        except PackageNotFoundError:
            text = "unknown (not installed: pip install -e .)"
        print(f"selfplay {text}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="selfplay",
        description="Guided asymmetric self-play for code LLMs: verify, evaluate, train.",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"selfplay_cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from selfplay_core.engines.errors import EngineError
    from selfplay_core.output_paths import OutputPathError
    from selfplay_core.problems import InputError
    from selfplay_core.sandbox.backends import SandboxUnavailable

    try:
        return int(args.func(args) or 0)
    except (CLIError, InputError, OutputPathError, SandboxUnavailable, EngineError) as e:
        print(f"selfplay {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"selfplay {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
