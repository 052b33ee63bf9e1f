"""Evaluate one checkpoint on several benchmarks and record it: the work of the evaluation
deployment (`flows/evaluate.py`), kept here so it needs no Prefect.

A checkpoint is `toy` (the toy world's starting model), a local Hugging Face folder, or an
`s3://bucket/key` / `file://` prefix written by the artifact store (downloaded and verified).
Benchmarks: `toy` (the toy world's held-out split, pass@k overall and by depth, the same subset
a self-play run evaluates on) and the code benchmarks of `selfplay evaluate` (`humanevalplus`,
`mbppplus`, `lcb`, `humaneval`, `mbpp`), scored by `selfplay_core.evaluation.runner`.
Each benchmark writes its report into `out_dir/<name>/`; one MLflow run gets every metric as
`<benchmark>/<metric>` and the reports as artifacts.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from selfplay_core.datasets.registry import load_benchmark
from selfplay_core.engines.base import SamplingParams
from selfplay_core.engines.hf import HFEngine
from selfplay_core.evaluation.fit import check_prompts_fit, context_window, load_tokenizer, prompt_problems
from selfplay_core.evaluation.prompts import get_template
from selfplay_core.evaluation.report import write_outputs
from selfplay_core.evaluation.runner import EvalConfig, evaluate
from selfplay_core.frozen import FrozenConfig
from selfplay_core.output_paths import ensure_output_dir
from selfplay_core.problems import InputError
from selfplay_core.sandbox import Executor
from selfplay_core.sandbox.config import SandboxConfig
from selfplay_core.storage import StorageConfig, open_store
from selfplay_core.storage.config import LOCAL_CHECKSUM_DIR
from selfplay_core.tracking.mlflow_run import RunTracker, resolve_tracking
from selfplay_core.worlds import registered as registered_worlds

BenchmarkName = Literal["toy", "humanevalplus", "mbppplus", "lcb", "humaneval", "mbpp"]


class CheckpointEvalConfig(FrozenConfig):
    """Parameters of one checkpoint evaluation (rendered as a form in the Prefect UI)."""

    checkpoint: str = Field("toy", description="'toy', a local model folder, or an s3:// or "
                            "file:// prefix written by the artifact store")
    benchmarks: list[BenchmarkName] = Field(default_factory=lambda: ["toy"],
                                            description="benchmarks to run, in order")
    n: int = Field(8, ge=1, description="sampled completions per problem")
    ks: list[int] = Field(default_factory=lambda: [1, 8], description="k values for pass@k (<= n)")
    greedy: bool = Field(False, description="also score one greedy sample per problem "
                         "(code benchmarks)")
    max_problems: int | None = Field(None, ge=1, description="evaluate at most this many "
                                     "problems per benchmark (a quick look; None: all)")
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int | None = Field(None, ge=1, description="None: 96 on toy, 1024 elsewhere")
    seed: int = 0
    world_seed: int = Field(0, description="toy world seed (the self-play run's world.seed)")
    data: str | None = Field(None, description="benchmark data directory or file (default: "
                             "$SELFPLAY_DATA or the data `selfplay data fetch` downloaded)")
    batch_size: int = Field(64, ge=1, description="sequences per forward pass of the hf engine")
    sandbox: SandboxConfig = Field(default_factory=lambda: SandboxConfig(workers=2))
    out_dir: str = Field("runs/eval", description="reports go to out_dir/<run name>/<benchmark>")
    mlflow_uri: str | None = Field(None, description="None: $MLFLOW_TRACKING_URI, else a local "
                                   "SQLite store under out_dir/mlruns")
    experiment: str = "selfplay-eval"
    run_name: str | None = None

    @model_validator(mode="after")
    def _check(self):
        if not self.benchmarks:
            raise ValueError("benchmarks must name at least one benchmark")
        if not self.ks or any(k < 1 or k > self.n for k in self.ks):
            raise ValueError(f"ks must lie in [1, n={self.n}], got {list(self.ks)}")
        return self


def _split_s3(uri: str) -> tuple[str, str]:
    m = re.match(r"^(s3://[^/]+)/(.+?)/*$", uri)
    if not m:
        raise InputError(f"checkpoint {uri!r}: expected s3://bucket/key/of/checkpoint")
    return m.group(1), m.group(2)


def resolve_checkpoint(checkpoint: str, work_dir: str | Path) -> Path:
    """A local model folder for `checkpoint` (downloading a stored one into work_dir)."""
    world = registered_worlds().get(checkpoint)
    if world is not None:   # a world's name: its default model (`toy`: the toy world's)
        try:
            return world.default_model()
        except FileNotFoundError as e:
            raise InputError(f"checkpoint {checkpoint!r}: {e}") from None
    if checkpoint.startswith(("s3://", "file://")):
        if checkpoint.startswith("s3://"):
            root, key = _split_s3(checkpoint)
        else:
            path = Path(checkpoint[len("file://"):])
            # The store's root is the folder holding its checksum sidecars; without one this is
            # a plain model folder.
            base = next((p for p in path.parents if (p / LOCAL_CHECKSUM_DIR).is_dir()), None)
            if base is None:
                return resolve_checkpoint(str(path), work_dir)
            root, key = base.as_uri(), path.relative_to(base).as_posix()
        store = open_store(StorageConfig.from_env(uri=root))
        dest = Path(work_dir) / "checkpoint"
        return store.get_dir(key, dest)
    path = Path(checkpoint).expanduser()
    if not (path / "config.json").is_file():
        raise InputError(f"checkpoint {checkpoint!r}: not a model folder (no config.json); give "
                         "'toy', a save_pretrained folder, or an s3:// prefix")
    return path


def expected_output_progress(name: str, log, steps: int = 4):
    """(on_compute, progress) callbacks for load_benchmark that log what is computed and each
    quarter done: the first evaluation of HumanEval+ / MBPP+ runs every canonical solution."""
    state = {"total": 0, "done": 0}

    def on_compute(n: int) -> None:
        state["total"] = n
        if n:
            log(f"{name}: computing the expected outputs of {n} problems (their canonical "
                "solutions run once in the sandbox; cached for the next time)")

    def progress(k: int) -> None:
        before, state["done"] = state["done"], state["done"] + k
        total = state["total"]
        if total and any(before < total * q / steps <= state["done"] for q in range(1, steps + 1)):
            log(f"{name}: expected outputs {state['done']}/{total}")

    return on_compute, progress


def evaluate_benchmark(name: str, engine, executor, cfg: CheckpointEvalConfig, out_dir: Path,
                       log=lambda m: None) -> dict:
    """One code benchmark through the runner (as `selfplay evaluate --model`); writes its files."""
    import dataclasses

    on_compute, progress = expected_output_progress(name, log)
    bench = load_benchmark(name, cfg.data, executor=executor, on_compute=on_compute, progress=progress)
    if cfg.max_problems and len(bench.problems) > cfg.max_problems:
        bench = dataclasses.replace(bench, problems=bench.problems[:cfg.max_problems],
                                    _content_hash=None)
    template = get_template(None, name)
    # Checked up front where prompts can be read without the sandbox (check_benchmarks_fit);
    # HumanEval and MBPP exist only now. Before any generation either way.
    check_prompts_fit(name, bench.problems, template, tokenizer=engine.tokenizer,
                      window=getattr(engine, "max_length", None),
                      max_new_tokens=cfg.max_new_tokens or 1024, checkpoint=cfg.checkpoint)
    ecfg = EvalConfig(n=cfg.n, ks=tuple(cfg.ks), greedy=cfg.greedy,
                      template=template,
                      sampling=SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p,
                                              max_new_tokens=cfg.max_new_tokens or 1024,
                                              seed=cfg.seed))
    run = evaluate(bench, executor, ecfg, engine=engine,
                   source_info={"model": cfg.checkpoint, "engine": type(engine).__name__})
    write_outputs(run, out_dir)
    return run.report


def check_benchmarks_fit(cfg: CheckpointEvalConfig, model_dir: Path) -> None:
    """Before anything starts: the prompts of each code benchmark (the subset evaluated) plus
    max_new_tokens fit the checkpoint's context, else one InputError naming the benchmark
    (e.g. HumanEval+ on the toy model: 238 + 1024 tokens > 512)."""
    window = context_window(model_dir)
    names = [n for n in cfg.benchmarks if n not in registered_worlds()]   # code benchmarks only
    if window is None or not names:
        return
    tokenizer = None
    for name in names:
        problems = prompt_problems(name, cfg.data)
        if problems is None:  # HumanEval / MBPP: checked once loaded (evaluate_benchmark)
            continue
        if cfg.max_problems:
            problems = problems[:cfg.max_problems]
        tokenizer = tokenizer or load_tokenizer(model_dir)
        check_prompts_fit(name, problems, get_template(None, name), tokenizer=tokenizer,
                          window=window, max_new_tokens=cfg.max_new_tokens or 1024,
                          checkpoint=cfg.checkpoint)


def run_name_for(cfg: CheckpointEvalConfig) -> str:
    if cfg.run_name:
        return cfg.run_name
    base = "toy" if cfg.checkpoint == "toy" else Path(cfg.checkpoint.rstrip("/")).name or "checkpoint"
    return f"eval-{base}-{time.strftime('%Y%m%d-%H%M%S')}"


def open_tracker(cfg: CheckpointEvalConfig, run_name: str, out_root: Path):
    uri, artifacts = resolve_tracking(cfg.mlflow_uri, cfg.out_dir)
    tracker = RunTracker(uri, cfg.experiment, run_name=run_name, artifact_location=artifacts,
                         tags={"kind": "evaluation", "checkpoint": cfg.checkpoint,
                               "benchmarks": ",".join(cfg.benchmarks)})
    tracker.log_params(cfg.model_dump(mode="json"))
    return tracker


def numeric_metrics(prefix: str, metrics: dict) -> dict[str, float]:
    return {f"{prefix}/{k}": float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def direct(name: str, fn, *args):
    return fn(*args)


def run_checkpoint_eval(cfg: CheckpointEvalConfig, *, call=direct, log=lambda m: None) -> dict:
    """Evaluate cfg.checkpoint on each of cfg.benchmarks (each through `call(name, fn, *args)`,
    a Prefect task in the flow); one MLflow run; returns a JSON-ready summary."""
    import tempfile

    run_name = run_name_for(cfg)
    out_root = ensure_output_dir(Path(cfg.out_dir) / run_name, "the evaluation folder (out_dir/run name)")
    with tempfile.TemporaryDirectory(prefix="selfplay-eval-") as tmp:
        model_dir = resolve_checkpoint(cfg.checkpoint, tmp)
        log(f"checkpoint {cfg.checkpoint} -> {model_dir}")
        check_benchmarks_fit(cfg, model_dir)
        tracker = open_tracker(cfg, run_name, out_root)
        status = "FAILED"
        try:
            engine = HFEngine(str(model_dir), batch_size=cfg.batch_size)
            metrics: dict[str, float] = {}
            with Executor(cfg.sandbox) as ex:
                for name in cfg.benchmarks:
                    if name in registered_worlds():   # a world as a benchmark (toy)
                        report = call(f"evaluate-{name}", registered_worlds()[name].evaluate_checkpoint,
                                      engine, ex, cfg, out_root / name)
                    else:
                        report = call(f"evaluate-{name}", evaluate_benchmark, name, engine, ex,
                                      cfg, out_root / name, log)
                    got = numeric_metrics(name, report["metrics"])
                    metrics.update(got)
                    tracker.log_metrics(got, step=0)
                    tracker.log_artifact(str(out_root / name / "report.json"), name)
                    log(f"{name}: " + ", ".join(f"{k}={v:.3f}" for k, v in got.items()))
            summary = {"checkpoint": cfg.checkpoint, "model_dir": str(model_dir),
                       "run_id": tracker.run_id, "tracking_uri": tracker.tracking_uri,
                       "out_dir": str(out_root), "metrics": metrics}
            (out_root / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            tracker.log_artifact(str(out_root / "summary.json"))
            status = "FINISHED"
        finally:
            tracker.finish(status)
    return summary
