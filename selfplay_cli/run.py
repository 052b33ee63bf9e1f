"""selfplay run: the self-play flow with the embedded default (toy world, tiny model, local
executor, local MLflow store, Prefect without a separate server)."""

from __future__ import annotations

import os
import sys


def register(sub) -> None:
    p = sub.add_parser("run", help="run self-play (GASP, AZR, RLVR) as a Prefect flow",
                       description="Run the self-play loop. Defaults: configs/tiny-cpu.yaml "
                       "semantics (toy world, tiny model, local sandbox, local MLflow).")
    p.add_argument("--config", help="YAML run config (default: built-in tiny-cpu defaults)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set learner.lr=1e-5 (repeatable)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a run from its last complete iteration (config: RUN_DIR/config.yaml "
                   "unless --config is given; --set still applies)")
    p.add_argument("--dry-run", action="store_true", help="validate the config, print the resolved plan, exit")
    p.add_argument("--no-prefect", action="store_true", help="run the loop without Prefect (debugging)")
    p.set_defaults(func=run)


def _env_defaults() -> None:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("DO_NOT_TRACK", "true")
    os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run(args) -> int:
    from selfplay_cli._common import CLIError
    from selfplay_core.config import ConfigError
    from selfplay_core.engines.errors import EngineError
    from selfplay_core.state import StateError
    from selfplay_core.storage import StorageError

    try:
        return _run(args)
    except (ConfigError, EngineError, StateError, StorageError) as e:  # one line, no traceback
        raise CLIError(str(e)) from None


def _run(args) -> int:
    from pathlib import Path

    from selfplay_core.config import dump_config, load_config
    from selfplay_core.loop.engine_setup import check_server, describe_setup, launches_server

    config = args.config
    if args.resume and config is None and (Path(args.resume) / "config.yaml").exists():
        config = str(Path(args.resume) / "config.yaml")  # the run's own config
    cfg = load_config(config, args.overrides)
    if args.dry_run:
        print(dump_config(cfg))
        print(describe_setup(cfg))
        plan = _gpu_plan(cfg)
        if plan:
            print(plan)
        return 0
    if cfg.engine.backend == "vllm" and not launches_server(cfg):
        check_server(cfg)  # before Prefect, MLflow or the model start
    _env_defaults()
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    run_dir = args.resume
    if run_dir:
        from selfplay_core.loop.driver import check_resumable
        check_resumable(run_dir, cfg)  # StateError naming the file and the last good iteration
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                        TimeElapsedColumn(), console=console, transient=False)
    with progress:
        bar = progress.add_task("self-play", total=cfg.iterations)

        def on_stage(name: str) -> None:
            progress.update(bar, description=f"{cfg.method}: {name}")

        if args.no_prefect:
            from selfplay_core.loop.driver import direct, run_selfplay

            def call(name, fn, *a):
                on_stage(name)
                return direct(name, fn, *a)

            summary = run_selfplay(cfg, call=call, run_dir=run_dir, resume=bool(run_dir),
                                   on_iteration=lambda step, m: progress.update(bar, completed=step))
            result = {"run_id": summary.run_id, "run_dir": summary.run_dir, "tracking_uri": summary.tracking_uri,
                      "heatmap": summary.heatmap, "checkpoint": summary.checkpoint}
        else:
            from flows.selfplay import for_config
            from tasks.stages import stage_listeners

            stage_listeners.append(on_stage)
            try:
                result = for_config(cfg)(config=cfg, resume=bool(run_dir), run_dir=run_dir)
            finally:
                stage_listeners.remove(on_stage)
        progress.update(bar, completed=cfg.iterations, description=f"{cfg.method}: done")
    _print_summary(result)
    return 0


def _print_summary(result: dict) -> None:
    import json
    from pathlib import Path

    state = json.loads((Path(result["run_dir"]) / "state.json").read_text())
    hist = state.get("history", [])
    cols = ["student/accepted/reward", "teacher/lemma/acceptance", "teacher/lift/acceptance",
            "teacher/azr/acceptance", "student/real/pass_rate", "eval/all/pass@1", "goalposts/solved",
            "goalposts/floor"]
    cols = [c for c in cols if any(c in h for h in hist)]
    print("step  " + "  ".join(f"{c.split('/', 1)[1][:22]:>22}" for c in cols))
    for h in hist:
        print(f"{h['step']:>4}  " + "  ".join(
            f"{h[c]:>22.3f}" if c in h else f"{'':>22}" for c in cols))
    print(f"\nMLflow run: {result['run_id']}  ({result['tracking_uri']})")
    uri = result["tracking_uri"]
    print(f"  open it:  {uri}" if uri.startswith(("http://", "https://"))
          else f"  open it:  mlflow ui --backend-store-uri {uri}")
    print(f"goalpost heatmap: {result['heatmap']}")
    lineage = Path(result["run_dir"]) / "lineage.html"
    if lineage.exists():
        print(f"curriculum lineage: {lineage}")
    print(f"final checkpoint: {result['checkpoint']}")
    for line in run_verdict(state):
        print(f"verdict: {line}")
    print(f"resume with: selfplay run --resume {result['run_dir']}")


def run_verdict(state: dict) -> list[str]:
    """One line per k: held-out pass@k at the end against the start checkpoint (eval.verdict)."""
    from selfplay_core.loop.driver import verdict_lines
    from selfplay_core.state import RunState

    return verdict_lines(RunState.from_json(state))


def _gpu_plan(cfg) -> str | None:
    from selfplay_core.config import ConfigError

    try:
        plan = cfg.resolved_plan()
    except ValueError as e:
        raise ConfigError(f"gpu plan: {e}") from None
    return None if plan is None else "resolved plan:\n" + plan.render()
