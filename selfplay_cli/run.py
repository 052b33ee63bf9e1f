"""selfplay run: the self-play flow with the embedded default (toy world, tiny model, local
executor, local MLflow store, Prefect without a separate server)."""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager


# The registered methods (selfplay_core.methods.registered(); a test keeps the two equal),
# spelled out so that `selfplay --help` does not import every method (a second of start-up).
# The last two are the toy world's oracle arms (registered by its plug-in).
METHODS = ("gasp", "gasp+rlvr", "gasp-edit", "azr", "rlvr", "sgs", "compassplay", "r-zero", "spice", "star",
           "oracle-curriculum", "oracle-filter")


def register(sub) -> None:
    p = sub.add_parser("run", help=f"run self-play as a Prefect flow; method.name: {', '.join(METHODS)}",
                       description="Run the self-play loop. Defaults: configs/tiny-cpu.yaml "
                       "semantics (toy world, tiny model, local sandbox, local MLflow). Methods "
                       f"(--set method.name=NAME): {', '.join(METHODS)}.")
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
    # transformers' "Loading weights" / "Writing model shards" bars, twice per iteration, between
    # the lines that matter; the run's own progress bar is enough.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def run(args) -> int:
    from selfplay_cli._common import CLIError
    from selfplay_core.config import ConfigError
    from selfplay_core.engines.errors import EngineError
    from selfplay_core.engines.gpu_config import DistributedLaunchError
    from selfplay_core.state import StateError
    from selfplay_core.storage import StorageError

    if args.resume and not os.path.isdir(args.resume):  # before any import that takes time
        raise CLIError(f"--resume {args.resume}: no such folder (give the run folder, "
                       "out_dir/<run name>, that holds state.json)")
    try:
        return _run(args)
    except (ConfigError, EngineError, StateError, StorageError, DistributedLaunchError) as e:  # one line, no traceback
        raise CLIError(str(e)) from None


def _run(args) -> int:
    from pathlib import Path

    from selfplay_core.config import ConfigError, dump_config, load_config
    from selfplay_core.loop.engine_setup import check_server, describe_setup, launches_server
    from selfplay_core.output_paths import check_output_dir
    from selfplay_core.state import StateError

    config = args.config
    if args.resume and config is None and (Path(args.resume) / "config.yaml").exists():
        config = str(Path(args.resume) / "config.yaml")  # the run's own config
    cfg = load_config(config, args.overrides)
    from selfplay_core.engines.gpu_config import launched_rank, refuse_distributed_launch

    # under torchrun: refused unless the config asks for a learner group (gpu.distributed)
    refuse_distributed_launch(gpu=cfg.gpu)
    launch = launched_rank()
    if launch is not None and launch[0] != 0:
        if args.dry_run:
            return 0  # rank 0 prints the plan
        from selfplay_core.loop.follower import follow
        return follow(cfg)  # learns only: no run folder, MLflow or checkpoint
    if args.dry_run:
        print(dump_config(cfg))
        print(describe_setup(cfg))
        plan = _gpu_plan(cfg)
        if plan:
            print(plan)
        return 0
    if not args.resume:  # the run folder and the local MLflow store go under out_dir
        check_output_dir(cfg.out_dir, "out_dir")  # nothing is made until the run starts
    from rich.console import Console

    console = Console(stderr=True)
    _env_defaults()  # before Prefect's settings are first read (the preflight reads its API URL)
    _preflight(cfg, args, console)  # every endpoint answers, before Prefect or the model start
    if cfg.engine.backend == "vllm" and not launches_server(cfg):
        check_server(cfg)  # the server serves the model
    run_dir = args.resume
    if run_dir:
        from selfplay_core.loop.driver import check_resumable
        check_resumable(run_dir, cfg)  # StateError naming the file and the last good iteration
    from selfplay_core.loop import interrupt

    interrupt.arm()
    from selfplay_core.rl.distributed import stop_followers

    try:
        with interrupt.trap():  # until the loop's own (a signal while Prefect starts, too)
            try:
                result = _run_with_progress(args, cfg, run_dir, console)
            finally:
                stop_followers()  # rank 0 of a learner group: the other ranks exit too
    except (ConfigError, StateError):
        raise  # one line that says what to do (resume or not)
    except interrupt.RunInterrupted as e:  # stopped between stages: no traceback
        if not _resume_hint(run_dir, cfg, console, stopped_by=e.signame):
            console.print(f"{e.signame}: the run stopped before its first iteration was saved; "
                          "nothing to resume", highlight=False, soft_wrap=True)
        return 128 + getattr(signal, e.signame)
    except BaseException:  # failed: the iterations done so far are saved
        _resume_hint(run_dir, cfg, console)
        raise
    _print_summary(result, cfg)
    return 0


def _preflight(cfg, args, console) -> None:
    """Each endpoint the run will use answers (selfplay_core/preflight.py), or one line each
    and exit 2; the Prefect API too when PREFECT_API_URL names a server."""
    from selfplay_core.preflight import Endpoint, preflight

    extra = []
    if not args.no_prefect:
        from prefect.settings import PREFECT_API_URL

        api = PREFECT_API_URL.value()
        if api:
            extra.append(Endpoint("PREFECT_API_URL", api, "start the Prefect server (`make up` "
                                  "serves one on port 4200), or unset PREFECT_API_URL: the run "
                                  "then starts a temporary one", path="/health"))
    report = preflight(cfg, extra)
    for note in report.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    if report.errors:
        from selfplay_cli._common import CLIError
        raise CLIError("\nselfplay run: error: ".join(report.errors))


def _resume_command() -> str:
    """How this run was started: a learner group resumes under the same launch."""
    from selfplay_core.engines.gpu_config import launched_rank

    launch = launched_rank()
    if launch is None:
        return "selfplay run"
    return f"torchrun --nproc_per_node {os.environ.get('LOCAL_WORLD_SIZE', launch[1])} " \
           "-m selfplay_cli.main run"


def _resume_hint(run_dir, cfg, console, stopped_by: str | None = None) -> bool:
    """After an interrupted or failed run: how to continue it, if it got far enough to save."""
    import json
    from pathlib import Path

    from selfplay_core.loop.driver import default_run_dir

    path = Path(run_dir or default_run_dir(cfg)) / "state.json"
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if state.get("finished"):
        return False
    why = f"{stopped_by}: " if stopped_by else ""
    console.print(f"{why}the run stopped after {state.get('iteration', 0)} of {cfg.iterations} "
                  f"iterations; resume with: {_resume_command()} --resume {path.parent.resolve()}",
                  highlight=False, soft_wrap=True)
    return True


def _run_with_progress(args, cfg, run_dir, console) -> dict:
    from selfplay_core.loop import interrupt
    from selfplay_core.progress import StepProgress

    if not args.no_prefect:
        import flows.selfplay  # noqa: F401  (configures Prefect's logging, which _library_info uses)
    # A live bar on a terminal, a line per iteration elsewhere; the time left is the iterations
    # left at the mean pace of those done in this process (set-up, goalpost mining and the
    # start's evaluation are not iterations).
    with _library_info(console), StepProgress(cfg.iterations, "self-play", "iteration",
                                              console=console) as bar:

        def on_iteration(step: int, metrics: dict) -> None:
            bar.advance_to(step, metrics.get("time/iteration_s"))

        def on_stage(name: str) -> None:
            bar.set_description(f"{cfg.method.name}: {name}")

        if args.no_prefect:
            from selfplay_core.loop.driver import direct, run_selfplay

            def call(name, fn, *a):
                on_stage(name)
                return direct(name, fn, *a)

            summary = run_selfplay(cfg, call=call, run_dir=run_dir, resume=bool(run_dir),
                                   on_iteration=on_iteration)
            result = {"run_id": summary.run_id, "run_dir": summary.run_dir, "tracking_uri": summary.tracking_uri,
                      "heatmap": summary.heatmap, "checkpoint": summary.checkpoint}
        else:
            from flows.selfplay import for_config, iteration_listeners
            from tasks.stages import stage_listeners

            if console.is_terminal:  # where the live bar shows the stage; a log file keeps them
                _quiet_task_run_logs()
            from selfplay_cli.prefect_server import start_temporary_server

            start_temporary_server()  # out of Ctrl-C's reach: the run stops cleanly, using it
            stage_listeners.append(on_stage)
            iteration_listeners.append(on_iteration)
            try:
                state = for_config(cfg)(config=cfg, resume=bool(run_dir), run_dir=run_dir,
                                        return_state=True)
                if state.is_cancelled() and interrupt.requested():  # the flow's RunInterrupted
                    raise interrupt.RunInterrupted(interrupt.requested())
                result = state.result()
            finally:
                stage_listeners.remove(on_stage)
                iteration_listeners.remove(on_iteration)
                _quiet_prefect_at_exit()
        bar.set_description(f"{cfg.method.name}: done")
    return result


@contextmanager
def _library_info(console):
    """selfplay_core's INFO lines on the terminal while the run goes: what a long step is doing
    (goalpost mining rounds on a first run, a checkpoint fetched from the store, spooled uploads
    delivered). Under Prefect they reach its console handler on the root logger; without Prefect
    a rich handler prints them above the progress bar. Restored afterwards (main() may be called
    in-process)."""
    import logging

    lib = logging.getLogger("selfplay_core")
    level, handler = lib.level, None
    lib.setLevel(logging.INFO)
    if not logging.getLogger().handlers:
        from rich.logging import RichHandler

        handler = RichHandler(console=console, show_path=False, show_time=False)
        lib.addHandler(handler)
    try:
        yield
    finally:
        lib.setLevel(level)
        if handler is not None:
            lib.removeHandler(handler)


class _TaskRunInfoFilter:
    """Drops Prefect's per-task INFO lines ("Task run 'update-466' - Finished in state
    Completed()", ~15 per iteration) from a terminal, where the live progress bar shows the
    stage; the flow logs each iteration's metrics, and warnings and errors still show. Output
    to a file keeps them: there they are the only sign of the stage (and tests wait on them).
    The Prefect API (and its UI) keeps every line: its handler sits on the task-run logger."""

    def filter(self, record) -> bool:
        import logging

        return not (record.name.startswith("prefect.task_runs") and record.levelno < logging.WARNING)


def _quiet_task_run_logs() -> None:
    import logging

    from prefect.logging.handlers import PrefectConsoleHandler

    for handler in logging.getLogger().handlers:
        if isinstance(handler, PrefectConsoleHandler) and not any(
                isinstance(f, _TaskRunInfoFilter) for f in handler.filters):
            handler.addFilter(_TaskRunInfoFilter())


def _quiet_prefect_at_exit() -> None:
    """Prefect stops its temporary API server (a flow run without PREFECT_API_URL starts one)
    from an atexit hook that logs "Stopping temporary server" at INFO: after our summary. This
    hook, registered later, runs first and leaves Prefect's logger warnings and errors only.
    (Stopping the server here instead would cut off Prefect's log worker, which sends its
    last batch at exit: "Error logging to API".)"""
    import atexit
    import logging

    atexit.register(lambda: logging.getLogger("prefect").setLevel(logging.WARNING))


# The run summary's line for the sighted ablation (selfplay_core/goalpost_view.py).
PRIVILEGED_NOTE = ("privileged=true: the teacher was shown each goalpost's reference program "
                   "(method.privileged_sighted_teacher), which a real goalpost does not have; "
                   "not the paper's setting, an ablation")


def _print_summary(result: dict, cfg) -> None:
    import json
    from pathlib import Path

    from selfplay_core.goalpost_view import privileged
    from selfplay_core.tracking.run_summary import describe_run, metrics_table, table_columns, table_legend

    state = json.loads((Path(result["run_dir"]) / "state.json").read_text())
    hist = state.get("history", [])
    verdict = run_verdict(state, cfg.eval.ks)
    print(metrics_table(hist))
    for line in table_legend(table_columns(hist), verdict=bool(verdict)):
        print(line)
    print()
    e = cfg.eval
    samples = e.n * e.max_problems if e.max_problems else None
    every = "each iteration" if e.every == 1 else f"every {e.every} iterations"
    in_loop = f"{e.max_problems or 'all'} problems x {e.n} samples, {every}"
    for line in describe_run(hist, samples_per_eval=samples, method=cfg.method.name,
                             verdict=verdict, in_loop=in_loop):
        print(line)
    if privileged(cfg.method):
        print(PRIVILEGED_NOTE)
    print()
    uri = result["tracking_uri"]
    print(f"MLflow run {result['run_id']} in {uri}")
    for line in _runs_view(uri, result["run_id"]):
        print(line)
    # Absolute paths throughout, as the tracking URI is: each line works from any folder.
    run_dir = Path(result["run_dir"]).resolve()
    if result["heatmap"]:
        print(f"goalpost heatmap: {Path(result['heatmap']).resolve()}")
    if (run_dir / "lineage.html").exists():
        print(f"curriculum lineage: {run_dir / 'lineage.html'}")
    if result["checkpoint"]:
        print(f"final checkpoint: {Path(result['checkpoint']).resolve()}")
    if not state.get("finished"):
        print(f"resume with: selfplay run --resume {run_dir}")


def _runs_view(uri: str, run_id: str) -> list[str]:
    """Where a person looks at this run and compares it with others: its MLflow page and its
    experiment's runs list (`make up` serves the default store). Each link carries
    `workflowType=machine_learning`: MLflow 3.17 opens on its GenAI view otherwise, whatever
    the experiment's tags say (tracking/mlflow_run.py, EXPERIMENT_TAGS)."""
    from pathlib import Path

    from selfplay_cli.serve import bin_of, run_url, runs_url

    try:
        from mlflow.tracking import MlflowClient
        exp = MlflowClient(uri).get_run(run_id).info.experiment_id
    except Exception:  # the pointer is a convenience; the run is logged either way
        exp = None
    served = uri.startswith(("http://", "https://"))
    base = uri if served else "http://127.0.0.1:5000"
    if exp is None:
        return [f"  MLflow UI: {base}"]
    lines = [f"  this run: {run_url(base, exp, run_id)}", f"  compare runs: {runs_url(base, exp)}"]
    if not served:
        repo = Path(__file__).resolve().parents[1]
        default = uri == f"sqlite:///{repo / 'runs' / 'mlruns' / 'mlflow.db'}"  # make up's store
        lines.append("  (served by " + ("`make up`, or " if default else "")
                     + f"`{bin_of('mlflow')} ui --backend-store-uri {uri}`)")
    return lines


def run_verdict(state: dict, ks=None) -> list[str]:
    """One line per k: held-out pass@k at the end against the start checkpoint (eval.verdict)."""
    from selfplay_core.loop.recorder import verdict_lines
    from selfplay_core.state import RunState

    return verdict_lines(RunState.from_json(state), ks)


def _gpu_plan(cfg) -> str | None:
    from selfplay_core.config import ConfigError

    try:
        plan = cfg.resolved_plan()
    except ValueError as e:
        raise ConfigError(f"gpu plan: {e}") from None
    return None if plan is None else "resolved plan:\n" + plan.render()
