"""selfplay study: the pre-registered learning study on the toy world (issue 17)."""

from __future__ import annotations

import sys


def _positive(text: str) -> int:
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return n


def _seed_list(text: str) -> str:
    """--seeds as given, once it is checked to be comma-separated whole numbers."""
    import argparse

    parts = [t.strip() for t in text.split(",")]
    if not all(t.lstrip("-").isdigit() for t in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, e.g. 0,1,2, got {text!r}")
    return text


def register(sub) -> None:
    p = sub.add_parser(
        "study", help="run the learning study (arms x seeds, one budget) and write its table",
        description="Run every arm of the learning study protocol for each seed (one at a time per "
        "process; several processes on one --out share the runs, e.g. one per core; an "
        "interrupted study continues where it stopped), evaluate each run's last checkpoint on "
        "the fixed goalpost set and the whole held-out split, and write study.md, study.png and "
        "table.json to --out and an MLflow run. --readme FILE puts the markdown between the study "
        "markers of FILE (docs/results.md), whatever it shows.")
    p.add_argument("--out", default="runs/study", help="study folder (default runs/study)")
    p.add_argument("--arms", default=None, help="comma-separated arms of the protocol (default: all)")
    p.add_argument("--seeds", type=_seed_list, default=None, help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--iterations", type=_positive, default=None, help="the budget per run (default 12)")
    p.add_argument("--floor-samplings", type=_positive, default=None, metavar="N",
                   help="samplings of the start checkpoint, the floor (default 3; seeds 0..N-1, so "
                   "the first 3 are those of a 3-sampling study)")
    p.add_argument("--set", dest="common", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for every training arm (part of the protocol)")
    p.add_argument("--configs", default="configs", help="folder of the arms' config files")
    p.add_argument("--new", action="store_true", help="start over in --out with this protocol")
    p.add_argument("--report-only", action="store_true",
                   help="only rebuild the table/figure/markdown from the saved evaluations "
                   "(and log them as a new MLflow study run)")
    p.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                   help="one report from these study folders (same start checkpoint, budget, "
                   "overrides, final evaluation and goalposts; each arm from one folder) into a "
                   "new --out; --arms orders the rows")
    p.add_argument("--readme", default=None,
                   help="markdown file whose study section to regenerate (docs/results.md)")
    p.add_argument("--list", action="store_true", help="print the protocol's arms and exit")
    p.set_defaults(func=run)


def _arm_names(args) -> list[str] | None:
    return [a.strip() for a in args.arms.split(",")] if args.arms else None


def _protocol(args):
    return _settings(args).select(_arm_names(args))


# The flags that fix a protocol's settings, and the protocol field each one sets.
_SETTING_FLAGS = (("--seeds", "seeds", "seeds"), ("--iterations", "iterations", "iterations"),
                  ("--floor-samplings", "floor_samplings", "final"), ("--set", "common", "common"))


def _settings(args):
    """The registered protocol with the flags' seeds, budget, floor and overrides (all arms)."""
    from selfplay_study.protocol import default_protocol

    proto = default_protocol()
    upd = {}
    if args.seeds:
        upd["seeds"] = tuple(int(s) for s in args.seeds.split(","))
    if args.iterations:
        upd["iterations"] = args.iterations
    if args.floor_samplings is not None:
        upd["final"] = {**proto.final.model_dump(), "floor_samplings": args.floor_samplings}
    if args.common:
        upd["common"] = tuple(proto.common) + tuple(args.common)
    return proto.model_validate({**proto.model_dump(), **upd}) if upd else proto


def _report_protocol(args, out):
    """--report-only reports the protocol the folder's runs were fixed with (its protocol.json),
    not the flags' defaults: without this, a 24-iteration study reported with no flags read its
    evaluations under the 12-iteration registry (6 Dec 2026). A settings flag that asks for
    another protocol than the saved one is an error; one that repeats it is allowed."""
    from selfplay_cli._common import CLIError
    from selfplay_study.protocol import saved_protocol

    if args.new:
        raise CLIError("--report-only reports the runs in --out; --new would discard them: drop one")
    try:
        saved = saved_protocol(out)
        asked = _settings(args)
    except ValueError as e:  # NotAStudyFolder, or a flag's value the protocol refuses
        raise CLIError(str(e)) from None
    for flag, attr, field in _SETTING_FLAGS:
        if getattr(args, attr) and getattr(asked, field) != getattr(saved, field):
            raise CLIError(
                f"{out / 'protocol.json'} fixed {field} = {_show(getattr(saved, field))} before "
                f"its runs, and {flag} asks for {_show(getattr(asked, field))}: --report-only "
                f"reports the saved protocol; drop {flag}, or give the --out of the study run "
                "with it")
    try:
        return saved.select(_arm_names(args))
    except ValueError as e:
        raise CLIError(f"{out}: {e}") from None


def _show(value) -> str:
    return repr(value.model_dump()) if hasattr(value, "model_dump") else repr(value)


def run(args) -> int:
    import os
    from pathlib import Path

    from selfplay_cli._common import CLIError
    from selfplay_core.config import ConfigError
    from selfplay_core.output_paths import ensure_output_dir
    from selfplay_study import runner

    os.environ.setdefault("DO_NOT_TRACK", "true")
    os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.merge:
        return _merge(args)
    if args.report_only and not args.list:
        return _report(args)
    try:
        proto = _protocol(args)
    except ValueError as e:
        raise CLIError(str(e)) from None
    if args.list:
        for a in proto.arms:
            print(f"{a.name:<20} {a.kind:<10} {a.config or '-':<28} {' '.join(a.overrides)}")
        return 0
    out = Path(args.out)
    command = _command()
    try:
        runner.first_training_arm(proto)
        for a in proto.arms:  # every config loads before the first run starts
            if a.trains:
                runner.arm_config(a, proto, proto.seeds[0], Path(args.configs), out)
        ensure_output_dir(out, "--out")  # before the first run, not when it saves
        rep = runner.run_study(proto, out, configs_dir=args.configs, new=args.new,
                               command=command,
                               log=lambda m: print(m, file=sys.stderr, flush=True))
        if not rep["complete"]:
            print(f"{len(rep['missing'])} run(s) are still running in other processes on "
                  f"{out}; the last of them writes the report")
            return 0
    except (ConfigError, runner.StudyError) as e:
        raise CLIError(str(e)) from None
    return _print_report(rep, out, args.readme)


def _report(args) -> int:
    from pathlib import Path

    from selfplay_study import runner

    out = Path(args.out)
    proto = _report_protocol(args, out)
    return _print_report(runner.report_and_log(proto, out, command=_command()), out, args.readme)


def _command() -> str | None:
    """The command as typed, for the report (None when called other than as `selfplay study`)."""
    return "selfplay study " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["study"] else None


def _print_report(rep: dict, out, readme: str | None) -> int:
    from selfplay_study.report import replace_readme_section

    print(f"MLflow study run {rep['mlflow_run_id']}", file=sys.stderr)
    print(rep["markdown"])
    print(f"study folder: {out} (study.md, study.png, table.json)")
    if readme:
        changed = replace_readme_section(readme, rep["markdown"])
        print(f"{readme}: study section {'updated' if changed else 'unchanged'}")
    return 0


def _merge(args) -> int:
    from pathlib import Path

    from selfplay_cli._common import CLIError
    from selfplay_core.output_paths import ensure_output_dir
    from selfplay_study import runner
    from selfplay_study.merge import MergeError, merge_into

    given = [flag for flag, attr, _ in _SETTING_FLAGS if getattr(args, attr)]
    given += [flag for flag, v in (("--new", args.new), ("--report-only", args.report_only),
                                   ("--list", args.list)) if v]
    if given:
        raise CLIError(f"--merge takes the settings of the folders it merges; drop {', '.join(given)}")
    out = ensure_output_dir(args.out, "--out")
    try:
        proto = merge_into([Path(f) for f in args.merge], out, _arm_names(args))
        rep = runner.report_and_log(proto, out, command=_command())
    except MergeError as e:
        raise CLIError(str(e)) from None
    return _print_report(rep, out, args.readme)
