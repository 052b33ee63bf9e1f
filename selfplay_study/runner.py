"""Run the study: the protocol is saved first (a changed protocol in the same folder is an
error: results never reshape it), then the start checkpoint's floor, then every arm x seed —
one at a time, each a normal self-play run with its own MLflow run — each followed by the final
evaluation of its last checkpoint. A run whose final evaluation is saved is not run again, so
an interrupted study continues where it stopped. The table, figure and markdown are computed
from the saved evaluations only, and logged to one MLflow run of the study.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from selfplay_study.final_eval import evaluate_checkpoint
from selfplay_study.protocol import Arm, Protocol
from selfplay_study import report


class StudyError(ValueError):
    """A study folder that does not match the protocol, or a bad arm/config."""


def arm_config(arm: Arm, protocol: Protocol, seed: int, configs_dir: Path, out_dir: Path,
               extra: tuple[str, ...] = ()):
    from selfplay_core.config import load_config

    sets = [f"iterations={protocol.iterations}", f"seed={seed}", f"out_dir={out_dir / 'runs'}",
            f"tracking.run_name={arm.name}-s{seed}", f"tracking.experiment={protocol.name}",
            *protocol.common, *arm.overrides, *extra]
    return load_config(configs_dir / arm.config, sets)


def _save_protocol(protocol: Protocol, out: Path, force: bool) -> None:
    path = out / "protocol.json"
    data = {"key": protocol.key(), "protocol": protocol.model_dump(mode="json")}
    if path.exists() and not force:
        old = json.loads(path.read_text())
        if old.get("key") != data["key"]:
            raise StudyError(f"{path}: this folder holds a study with another protocol "
                             f"({old.get('key')} vs {data['key']}); use another --out, or --new "
                             "to discard its results")
        return
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def first_training_arm(protocol: Protocol):
    """The arm whose config names the start checkpoint, the world and so the goalposts and the
    held-out split every arm is measured on; a study of untrained arms alone has none."""
    for a in protocol.arms:
        if a.trains:
            return a
    raise StudyError(f"--arms {','.join(a.name for a in protocol.arms)}: no training arm; the start "
                     "checkpoint and the evaluation sets come from one (e.g. --arms base,rlvr)")


def fixed_sets(protocol: Protocol, configs_dir: Path, out: Path, executor):
    """The goalpost set every arm is measured on (the start checkpoint's, as the runs mine it)
    and the whole held-out split."""
    from selfplay_core.loop.context import resolve_model_dir
    from selfplay_core.loop.worlds import build_world, select_goalposts
    from selfplay_core.engines.hf import HFEngine

    cfg = arm_config(first_training_arm(protocol), protocol, protocol.seeds[0], configs_dir, out)
    if cfg.model.torch_threads:
        # What every run sets for itself: the floor's evaluations (before any run) took 290-320 s
        # each at torch's default threads with two study processes on 2 cores, an arm's ~25 s
        # after its run had set one thread.
        import torch

        torch.set_num_threads(cfg.model.torch_threads)
    model_dir = resolve_model_dir(cfg)
    world = build_world(cfg, executor=executor)
    engine = HFEngine(str(model_dir), batch_size=cfg.engine.batch_size)
    gps = select_goalposts(world, cfg, engine=engine, executor=executor, model_dir=model_dir)
    heldout = list(world.toy.eval.problems) if hasattr(world, "toy") else list(world.eval_problems)
    return model_dir, gps, heldout


def _prepare_tracking(protocol: Protocol, out: Path) -> None:
    """Create the runs' MLflow store and experiment once, so that study processes starting together do
    not race to create the same tables or experiment (a given MLFLOW_TRACKING_URI is a server's
    business)."""
    from selfplay_core.tracking.mlflow_run import EXPERIMENT_TAGS, resolve_tracking

    uri, artifacts = resolve_tracking(None, str(out / "runs"))
    if uri.startswith("sqlite:"):
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        if client.get_experiment_by_name(protocol.name) is None:
            client.create_experiment(protocol.name, artifact_location=artifacts, tags=EXPERIMENT_TAGS)


def claim(out: Path, name: str) -> Path | None:
    """Take run `name` for this process: a claim file made atomically (O_EXCL) holding host and
    pid. None when a live process on this host holds it (or one on another host: its liveness
    cannot be told from here). A claim whose process is gone (an interrupted study) is taken over."""
    d = out / "claims"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{name}.claim"
    me = f"{socket.gethostname()} {os.getpid()}"
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not _stale(path):
                return None
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(me)
        return path
    return None


def _stale(path: Path) -> bool:
    try:
        host, pid = path.read_text().split()
    except (OSError, ValueError):
        return True   # unreadable or half-written by a process that died
    if host != socket.gethostname():
        return False
    if int(pid) == os.getpid():
        return True   # left by an earlier call of this process that failed
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@contextmanager
def _setup_lock(out: Path):
    """One process at a time through the setup (protocol file, fixed sets, tracking store)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".setup.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run_study(protocol: Protocol, out: str | Path, *, configs_dir: str | Path = "configs",
              new: bool = False, extra: tuple[str, ...] = (), log: Callable[[str], None] = print,
              workers: int = 2, command: str | None = None) -> dict:
    """Every (arm, seed) of the protocol not yet in `out`, then the report. Several processes
    may work on one folder at once (e.g. one per core): each claims the next run nobody has
    (`claim`), results are files per run, and whichever finds the plan complete writes the
    report and its MLflow run."""
    from selfplay_core.loop.driver import run_selfplay
    from selfplay_core.sandbox import Executor, SandboxConfig

    out, configs_dir = Path(out), Path(configs_dir)
    evals = out / "evals"
    t_study = time.perf_counter()
    with Executor(SandboxConfig(workers=workers)) as ex:
        with _setup_lock(out):
            _save_protocol(protocol, out, new)
            evals.mkdir(parents=True, exist_ok=True)
            model_dir, gps, heldout = fixed_sets(protocol, configs_dir, out, ex)
            (out / "goalposts.json").write_text(json.dumps([g.id for g in gps]))
            _prepare_tracking(protocol, out)
        log(f"study {protocol.name} ({protocol.key()}): {len(gps)} goalposts, {len(heldout)} "
            f"held-out tasks, start checkpoint {model_dir}")
        f = protocol.final
        # Seed-major (all arms of seed 0, then seed 1, ...), the floor first: a study cut short
        # still has every arm at the seeds it reached.
        plan = [(a, s) for a in protocol.arms if not a.trains for s in range(f.floor_samplings)]
        plan += [(a, s) for s in protocol.seeds for a in protocol.arms if a.trains]
        for arm, seed in plan:
            path = evals / f"{arm.name}-s{seed}.json"
            if path.exists():
                continue
            held = claim(out, f"{arm.name}-s{seed}")
            if held is None:
                continue   # another process is running it
            t0 = time.perf_counter()
            if arm.trains:
                cfg = arm_config(arm, protocol, seed, configs_dir, out, extra)
                log(f"[{arm.name} seed {seed}] {protocol.iterations} iterations ...")
                summary = run_selfplay(cfg, executor=ex, resume=_unfinished(cfg))
                ckpt, run_id = summary.checkpoint, summary.run_id
                train_s = time.perf_counter() - t0
            else:
                ckpt, run_id, train_s = str(model_dir), None, 0.0
            # The floor's samplings differ by seed (and from every arm's); an arm's evaluation
            # seed is its run seed's.
            res = evaluate_checkpoint(ckpt, gps, heldout, ex, f,
                                      seed=f.seed + 1000 * seed + (0 if arm.trains else 500))
            row = {"arm": arm.name, "seed": seed, "run_id": run_id, "checkpoint": ckpt,
                   "wall_s": round(train_s, 1) if arm.trains else None, "eval": res,
                   "diagnostics": run_diagnostics(cfg, run_id, arm.diagnostics) if arm.trains else {}}
            path.write_text(json.dumps(row))
            held.unlink(missing_ok=True)
            s = report.summarize(res, f.ks)
            log(f"[{arm.name} seed {seed}] goalpost hits {s['goalposts/hits']}/{s['goalposts/total']}, "
                f"pass rate {s['goalposts/pass_rate']:.4f}; held-out "
                + " ".join(f"pass@{k} {s[f'heldout/pass@{k}']:.3f}" for k in f.ks)
                + f" (train {train_s:.0f}s, eval {res['seconds']:.0f}s)")
    missing = [f"{a.name}-s{s}" for a, s in plan if not (evals / f"{a.name}-s{s}.json").exists()]
    if missing:
        log(f"nothing left to claim; {len(missing)} run(s) still running in other processes "
            f"({', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}): the last to finish "
            "writes the report")
        return {"complete": False, "missing": missing}
    rep = report_and_log(protocol, out, command=command, wall_s=time.perf_counter() - t_study)
    rep["complete"] = True
    return rep


def report_and_log(protocol: Protocol, out: Path, command: str | None = None,
                   wall_s: float | None = None) -> dict:
    """The table, figure and markdown from the saved evaluations, and the study's MLflow run."""
    results = load_results(protocol, out)
    rep = write_report(protocol, out, results, wall_s=wall_s, command=command)
    rep["mlflow_run_id"] = log_study(protocol, out, rep["rows"], results)
    return rep


def run_diagnostics(cfg, run_id: str | None, keys: tuple[str, ...]) -> dict[str, list[list[float]]]:
    """The run's history of each diagnostic metric, [[step, value], ...] (absent keys: [])."""
    if not keys or run_id is None:
        return {}
    from mlflow.tracking import MlflowClient

    from selfplay_core.tracking.mlflow_run import EXPERIMENT_TAGS, resolve_tracking

    client = MlflowClient(tracking_uri=resolve_tracking(cfg.tracking.mlflow_uri, cfg.out_dir)[0])
    return {k: [[m.step, m.value] for m in sorted(client.get_metric_history(run_id, k),
                                                  key=lambda m: m.step)] for k in keys}


def _unfinished(cfg) -> bool:
    """An interrupted study left this run's folder mid-run: continue it rather than refuse."""
    from selfplay_core.loop.driver import default_run_dir
    from selfplay_core.state import load_state

    path = default_run_dir(cfg) / "state.json"
    return path.exists() and not load_state(path).finished


def mlflow_name(arm: str) -> str:
    """An arm's name as MLflow metric and tag keys allow it (alphanumerics, _ - . space : /):
    `gasp+rlvr` -> `gasp_plus_rlvr`."""
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", arm.replace("+", "_plus_"))


def log_study(protocol: Protocol, out: Path, rows: list[dict], results: dict[str, list[dict]],
              tracking_uri: str | None = None) -> str:
    """One MLflow run for the study: the protocol as params, each arm's means as metrics
    (`<arm>/<metric>`), the table, figure and markdown as artifacts. Returns its run id."""
    from selfplay_core.tracking.mlflow_run import RunTracker, resolve_tracking

    uri, artifacts = resolve_tracking(tracking_uri, str(out))
    t = RunTracker(uri, protocol.name, run_name=f"study-{protocol.key()}",
                   tags={"kind": "learning-study", "protocol": protocol.key()},
                   artifact_location=artifacts)
    try:
        t.log_params({"protocol": protocol.model_dump(mode="json")})
        metrics = {}
        for r in rows:
            for key, *_ in report.metrics(protocol.final.ks):
                m, sd = r[key]
                if r["n"]:
                    metrics[f"{mlflow_name(r['arm'])}/{key}"] = m
                    metrics[f"{mlflow_name(r['arm'])}/{key}_sd"] = sd
            metrics[f"{mlflow_name(r['arm'])}/goalposts/union"] = r["goalposts/union"]
        t.log_metrics(metrics, step=0)
        for name in ("study.md", "study.png", "table.json", "protocol.json"):
            if (out / name).exists():
                t.log_artifact(str(out / name))
        t.set_tags({f"run.{mlflow_name(e['arm'])}.s{e['seed']}": e["run_id"] for es in results.values()
                    for e in es if e.get("run_id")})
        t.finish("FINISHED")
    except BaseException:
        t.finish("FAILED")
        raise
    return t.run_id


def load_results(protocol: Protocol, out: Path) -> dict[str, list[dict]]:
    results = {}
    for arm in protocol.arms:
        runs = range(protocol.final.floor_samplings) if not arm.trains else protocol.seeds
        results[arm.name] = [json.loads(p.read_text()) for p in
                             (out / "evals" / f"{arm.name}-s{s}.json" for s in runs) if p.exists()]
    return results


def write_report(protocol: Protocol, out: Path, results: dict, wall_s: float | None = None,
                 command: str | None = None) -> dict:
    rows = report.arm_rows(protocol, results)
    fig = report.figure(protocol, rows, out / "study.png")
    md = study_markdown(protocol, rows, command=command)
    (out / "study.md").write_text(md)
    (out / "table.json").write_text(json.dumps(
        [{k: v for k, v in r.items() if k != "per_seed"} for r in rows], indent=1, default=str))
    return {"rows": rows, "markdown": md, "figure": str(fig), "wall_s": wall_s}


def _budget_phrase(protocol: Protocol) -> str:
    """`make run` trains the protocol's default number of iterations; a study with another budget
    must not claim to be that one (the 6 Dec 24-iteration study's report did)."""
    default = Protocol.model_fields["iterations"].default
    if protocol.iterations == default:
        return "the `make run` budget"
    return f"{protocol.iterations / default:g}x the `make run` budget of {default}"


def study_markdown(protocol: Protocol, rows: list[dict], command: str | None = None) -> str:
    f = protocol.final
    total_train = sum(sum(r["wall_s"]) for r in rows if r["wall_s"])
    lines = [
        f"Protocol `{protocol.key()}` (fixed before the runs; `protocol.json` in the study folder): "
        f"{len(protocol.seeds)} seeds ({', '.join(map(str, protocol.seeds))}) per training arm, "
        f"{protocol.iterations} iterations each ({_budget_phrase(protocol)}), same start checkpoint. "
        f"Final evaluation of each run's last checkpoint: the fixed goalpost set at k = "
        f"{f.goalpost_k} samples (a goalpost is hit when one passes) and the whole held-out split "
        f"x {f.heldout_n} samples (T = {f.temperature}). The start checkpoint is evaluated "
        f"{f.floor_samplings} times with different sampling seeds: its spread is the floor. "
        f"± is the standard deviation over seeds (over samplings for the start checkpoint); a "
        f"difference is claimed only beyond two standard errors of the difference of means.",
        "",
    ]
    if command:
        lines += [f"`{command}`" + (f" (train time {total_train / 60:.0f} min in all)" if total_train else ""), ""]
    lines += [report.markdown_table(protocol, rows), "", "Held-out pass@k by depth (means over seeds):",
              "", report.depth_table(rows, f.ks), "", "Pre-registered comparisons:", ""]
    lines += report.comparisons(rows, f.ks)
    diag = report.diagnostics_table(rows)
    if diag:
        lines += ["", "Each method's own diagnostic (in-run MLflow metrics; oracle-based ones are "
                  "diagnostics only, never in a reward):", "", diag]
    return "\n".join(lines) + "\n"
