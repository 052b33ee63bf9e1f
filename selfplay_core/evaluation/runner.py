"""The benchmark runner: samples (from an engine or a file) -> executor verdicts -> pass@k.

Engine mode renders each problem with the prompt template, asks the engine for `n` samples per
problem (plus one greedy sample with `greedy`), extracts the program from every completion, and
verifies it. Samples mode takes programs from a samples file (`{"problem_id", "sample_id",
"code"}`; a `sample_id` of "greedy" marks the greedy sample). Both end in the same scoring:

* a sample that hits a harness error is retried once; if it fails again it is left out of n
  (a harness error is never the model's success or failure) and counted in the report;
* pass@k is the mean over problems of the unbiased per-problem estimate (every problem needs
  n >= k); greedy pass@1 is the share of problems whose greedy sample passes.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from selfplay_core.datasets.benchmark import BenchmarkSet
from selfplay_core.engines.base import Completion, Engine, SamplingParams
from selfplay_core.evaluation.extract import build_program, program_from_completion
from selfplay_core.evaluation.passk import PassAtKError, pass_at_k, pass_at_ks
from selfplay_core.evaluation.prompts import PromptTemplate, get_template
from selfplay_core.evaluation.verify import verify_programs
from selfplay_core.problems import InputError, Problem, Sample, SampleVerdict, Verdict

log = logging.getLogger(__name__)

GREEDY_ID = "greedy"
# Metadata fields that results are broken down by, where a benchmark has them (LCB).
GROUP_FIELDS = ("platform", "difficulty")


@dataclass
class EvalConfig:
    n: int = 1                      # sampled completions per problem (engine mode)
    ks: Sequence[int] = (1,)
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(
        temperature=0.8, top_p=0.95, max_new_tokens=1024))
    greedy: bool = False            # also score one greedy (temperature 0) sample per problem
    template: PromptTemplate | None = None
    batch_problems: int = 8         # problems per engine.generate call
    early_exit: bool = True         # stop a sample at its first failing test
    missing: str = "error"          # samples mode, a problem without samples: error | zero
    samples_per_problem: int | None = None  # samples mode: use exactly the first n per problem

    def check(self) -> None:
        if self.missing not in ("error", "zero"):
            raise InputError(f"missing must be 'error' or 'zero', got {self.missing!r}")
        if self.n < 0 or self.batch_problems < 1:
            raise InputError("n must be >= 0 and batch_problems >= 1")
        if any(k < 1 for k in self.ks):
            raise PassAtKError(f"k values must be >= 1, got {list(self.ks)}")


@dataclass
class ScoredSample:
    problem_id: str
    sample_id: str
    code: str
    verdict: SampleVerdict
    completion: str | None = None
    finish_reason: str | None = None
    n_tokens: int | None = None

    @property
    def greedy(self) -> bool:
        return str(self.sample_id) == GREEDY_ID


@dataclass
class EvalRun:
    """Everything one evaluation produced; `report` is the JSON-ready summary."""

    bench: BenchmarkSet
    results: list[dict]
    samples: list[ScoredSample]
    report: dict


# ------------------------------------------------------------------------------------------------
# Verification
# ------------------------------------------------------------------------------------------------

def _verify(executor, bench: BenchmarkSet, items: list[tuple[Problem, str, str]], *,
            early_exit: bool, progress: Callable[[int], None] | None) -> list[SampleVerdict]:
    """Verdicts for (problem, sample_id, program); harness errors are retried once."""
    return verify_programs(executor, [(p, sid, build_program(p, code, benchmark=bench.name))
                                      for p, sid, code in items],
                           early_exit=early_exit, progress=progress, retry_harness_errors=True)


# ------------------------------------------------------------------------------------------------
# Sample sources
# ------------------------------------------------------------------------------------------------

def _chunks(seq, size):
    for i in range(0, len(seq), size):
        yield seq[i:i + size]


def _check_shape(outs, n_prompts: int, n: int) -> None:
    if not isinstance(outs, list) or len(outs) != n_prompts or any(
            not isinstance(o, list) or len(o) != n for o in outs):
        raise RuntimeError(f"engine returned a malformed batch: expected {n_prompts} lists of {n} "
                           "completions")


def _program_from(c: Completion, p: Problem, prompt: str, template: PromptTemplate, bench: str) -> str:
    return program_from_completion(c.text, p, prompt=prompt, completes_prompt=template.completes_prompt,
                                   benchmark=bench)


def _generate_and_verify(bench, engine: Engine, cfg: EvalConfig, template, executor, progress,
                         timings) -> list[ScoredSample]:
    greedy_params = dataclasses.replace(cfg.sampling, temperature=0.0, top_p=1.0)
    out: list[ScoredSample] = []
    for chunk in _chunks(bench.problems, cfg.batch_problems):
        prompts = [template.render(p, bench.name) for p in chunk]
        batch: list[tuple[Problem, str, Completion, str]] = []
        runs = []
        if cfg.n:
            runs.append((cfg.n, cfg.sampling, lambda j: f"s{j}"))
        if cfg.greedy:
            runs.append((1, greedy_params, lambda j: GREEDY_ID))
        for n, params, name in runs:
            t0 = time.perf_counter()
            outs = engine.generate(prompts, n, params)
            timings["generate_s"] += time.perf_counter() - t0
            _check_shape(outs, len(prompts), n)
            for p, prompt, comps in zip(chunk, prompts, outs):
                for j, c in enumerate(comps):
                    batch.append((p, name(j), c, _program_from(c, p, prompt, template, bench.name)))
        t0 = time.perf_counter()
        verdicts = _verify(executor, bench, [(p, sid, prog) for p, sid, _, prog in batch],
                           early_exit=cfg.early_exit, progress=progress)
        timings["verify_s"] += time.perf_counter() - t0
        for (p, sid, c, prog), v in zip(batch, verdicts):
            out.append(ScoredSample(p.id, sid, prog, v, completion=c.text,
                                    finish_reason=c.finish_reason, n_tokens=len(c.token_ids) or None))
    return out


def group_samples(bench: BenchmarkSet, samples: list[Sample], cfg: EvalConfig, where: str = "samples"):
    """Check a samples file against the benchmark: ({pid: [Sample]}, {pid: greedy Sample}, ignored).

    Unknown problem ids and duplicate (problem_id, sample_id) pairs are errors; samples of
    problems that the benchmark's filters excluded are ignored and counted."""
    known = bench.by_id()
    sampled: dict[str, list[Sample]] = collections.defaultdict(list)
    greedy: dict[str, Sample] = {}
    seen = set()
    ignored = 0
    for k, s in enumerate(samples, 1):
        pid = str(s.problem_id)
        if pid not in known:
            if pid in bench.excluded_ids:
                ignored += 1
                continue
            raise InputError(f"{where}: sample #{k} (sample_id {s.sample_id!r}): field 'problem_id': "
                             f"unknown problem {pid!r} for {bench.name} (ids look like "
                             f"{bench.problems[0].id if bench.problems else '?'!r})")
        key = (pid, str(s.sample_id))
        if key in seen:
            raise InputError(f"{where}: sample #{k}: duplicate sample_id {s.sample_id!r} for {pid!r}")
        seen.add(key)
        if str(s.sample_id) == GREEDY_ID:
            greedy[pid] = s
        else:
            sampled[pid].append(s)
    if cfg.samples_per_problem is not None:
        n = cfg.samples_per_problem
        short = [pid for pid in sampled if len(sampled[pid]) < n]
        if short:
            raise InputError(f"{where}: --n {n} but {len(short)} problem(s) have fewer samples "
                             f"(e.g. {short[0]!r} with {len(sampled[short[0]])})")
        sampled = {pid: ss[:n] for pid, ss in sampled.items()}
    if cfg.greedy:
        lacking = [p.id for p in bench.problems if p.id not in greedy]
        if lacking:
            raise InputError(f"{where}: --greedy needs one sample with sample_id 'greedy' per problem; "
                             f"{len(lacking)} problem(s) have none (e.g. {lacking[0]!r})")
    if not sampled and not greedy:
        raise InputError(f"{where}: no samples for any of the {len(bench.problems)} selected problems")
    return dict(sampled), greedy, ignored


def _verify_file_samples(bench, sampled, greedy, cfg, executor, progress, timings):
    known = bench.by_id()
    items = [(known[pid], str(s.sample_id), s.code) for pid, ss in sampled.items() for s in ss]
    items += [(known[pid], GREEDY_ID, s.code) for pid, s in greedy.items()]
    t0 = time.perf_counter()
    verdicts = _verify(executor, bench, items, early_exit=cfg.early_exit, progress=progress)
    timings["verify_s"] += time.perf_counter() - t0
    return [ScoredSample(p.id, sid, code, v) for (p, sid, code), v in zip(items, verdicts)]


# ------------------------------------------------------------------------------------------------
# Scoring
# ------------------------------------------------------------------------------------------------

def _per_problem(bench, scored: list[ScoredSample], ks, missing: str, expect_sampled: bool):
    by_pid: dict[str, list[ScoredSample]] = collections.defaultdict(list)
    for s in scored:
        by_pid[s.problem_id].append(s)
    results, counts, missing_ids = [], {}, []
    for p in bench.problems:
        ss = by_pid.get(p.id, [])
        sampled = [s for s in ss if not s.greedy]
        g = next((s for s in ss if s.greedy), None)
        scored_ = [s for s in sampled if s.verdict.verdict is not Verdict.harness_error]
        n, c = len(scored_), sum(s.verdict.passed for s in scored_)
        row = {"problem_id": p.id, "n": n, "c": c}
        for f in GROUP_FIELDS:
            if f in (p.metadata or {}):
                row[f] = p.metadata[f] or "unknown"
        if expect_sampled and not sampled:
            missing_ids.append(p.id)
            row["missing"] = True
            if missing == "zero":   # scored as if every sample failed
                counts[p.id] = (max(ks), 0)
        elif expect_sampled:
            counts[p.id] = (n, c)
        for k in ks:
            if p.id in counts and counts[p.id][0] >= k:
                row[f"pass@{k}"] = pass_at_k(*counts[p.id], k)
        if g is not None:
            row["greedy_passed"] = g.verdict.passed
            row["greedy_verdict"] = g.verdict.verdict.value
        row["verdicts"] = dict(collections.Counter(s.verdict.verdict.value for s in sampled))
        row["harness_errors"] = len(sampled) - n + (
            1 if g is not None and g.verdict.verdict is Verdict.harness_error else 0)
        row["samples"] = [{"sample_id": s.sample_id, "verdict": s.verdict.verdict.value,
                           "time_s": round(s.verdict.time_s, 4),
                           **({"detail": s.verdict.detail} if s.verdict.detail else {})} for s in ss]
        results.append(row)
    if missing_ids and missing == "error":
        raise InputError(f"no samples for {len(missing_ids)} of {len(bench.problems)} problems "
                         f"(e.g. {missing_ids[0]!r}); pass missing='zero' (--missing zero) to score "
                         "them as failures")
    return results, counts, missing_ids


def _metrics(results, counts, ks, warnings: list | None = None) -> dict:
    m: dict = {}
    if counts:
        harness = {r["problem_id"]: r["harness_errors"] for r in results}
        for k in ks:
            short = [pid for pid, (n, _) in counts.items() if n < k]
            # Too few samples only because harness errors were left out: score pass@k on the
            # problems that have enough, and say so. Any other shortfall is the caller's error.
            if short and all(counts[pid][0] + harness.get(pid, 0) >= k for pid in short):
                eligible = {pid: nc for pid, nc in counts.items() if nc[0] >= k}
                if eligible:
                    m.update(pass_at_ks(eligible, [k]))
                if warnings is not None:
                    warnings.append(f"pass@{k} over {len(eligible)} of {len(counts)} problems: "
                                    f"{len(short)} lost samples to harness errors")
            else:
                m.update(pass_at_ks(counts, [k]))
    greedy = [r["greedy_passed"] for r in results
              if "greedy_passed" in r and r.get("greedy_verdict") != Verdict.harness_error.value]
    if greedy:
        m["greedy_pass@1"] = sum(greedy) / len(greedy)
    return m


def _breakdown(results, counts, ks) -> dict:
    out = {}
    for f in GROUP_FIELDS:
        groups = collections.defaultdict(list)
        for r in results:
            if f in r:
                groups[r[f]].append(r)
        if not groups:
            continue
        out[f] = {}
        for g, rows in sorted(groups.items()):
            sub = {r["problem_id"]: counts[r["problem_id"]] for r in rows if r["problem_id"] in counts}
            out[f][g] = {"n_problems": len(rows), **_metrics(rows, sub, ks)}
    return out


class HarnessFailure(RuntimeError):
    """Too many samples ended in a sandbox harness error to trust the scores."""


def _check_harness_errors(results, n_samples: int, executor, warnings: list[str]) -> None:
    """Samples the sandbox could not judge (after its retries) are left out of pass@k: say so
    loudly, and fail past `sandbox.max_harness_error_share` (and at least 3), as the loop does:
    a score that rests on a failing sandbox is not a score."""
    excluded = sum(r["harness_errors"] for r in results)
    if not excluded:
        return
    share = float(getattr(getattr(executor, "config", None), "max_harness_error_share", 0.05))
    msg = (f"{excluded} of {n_samples} samples ended in a sandbox harness error after retries and "
           "are left out of pass@k (their problems are scored on fewer samples)")
    log.warning(msg)
    warnings.append(msg)
    if excluded >= 3 and excluded > share * max(1, n_samples):
        raise HarnessFailure(f"{msg}: more than sandbox.max_harness_error_share={share}; the "
                             "sandbox is failing (a worker that keeps dying, a full disk, a "
                             "missing bubblewrap), so no score is reported")


def evaluate(bench: BenchmarkSet, executor, config: EvalConfig | None = None, *,
             engine: Engine | None = None, samples: list[Sample] | None = None,
             samples_source: str = "samples", source_info: dict | None = None,
             progress: Callable[[int], None] | None = None) -> EvalRun:
    """Evaluate `engine` (or the given `samples`) on `bench` with `executor`."""
    cfg = config or EvalConfig()
    cfg.check()
    if (engine is None) == (samples is None):
        raise ValueError("evaluate() needs exactly one of engine= or samples=")
    if not bench.problems:
        raise InputError(f"{bench.name}: no problems selected (check the filters)")
    t_start = time.perf_counter()
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    timings = collections.Counter({"generate_s": 0.0, "verify_s": 0.0})
    ks = sorted(set(cfg.ks))
    ignored = 0
    template = None
    if engine is not None:
        if cfg.n and max(ks) > cfg.n:
            raise PassAtKError(f"pass@{max(ks)} needs n >= {max(ks)} samples per problem, got n={cfg.n}")
        if not cfg.n and not cfg.greedy:
            raise InputError("nothing to do: n is 0 and greedy is off")
        template = cfg.template or get_template(None, bench.name)
        scored = _generate_and_verify(bench, engine, cfg, template, executor, progress, timings)
        expect_sampled = cfg.n > 0
    else:
        sampled, greedy, ignored = group_samples(bench, samples, cfg, samples_source)
        scored = _verify_file_samples(bench, sampled, greedy, cfg, executor, progress, timings)
        expect_sampled = bool(sampled)
    results, counts, missing_ids = _per_problem(bench, scored, ks, cfg.missing, expect_sampled)
    warnings: list[str] = []
    metrics = _metrics(results, counts, ks, warnings)
    _check_harness_errors(results, len(scored), executor, warnings)
    for r in results:
        r["dataset_version"] = bench.version
        r["content_hash"] = bench.content_hash
    verdicts = collections.Counter(s.verdict.verdict.value for s in scored)
    total = time.perf_counter() - t_start
    report = {
        "format": "selfplay-eval/1",
        "started_at": started,
        "dataset": bench.describe(),
        "source": {"kind": "engine" if engine is not None else "samples", **(source_info or {})},
        "sampling": _sampling_info(cfg, template, engine is not None, counts),
        "executor": executor_info(executor, bench, cfg.early_exit),
        "metrics": metrics,
        "breakdown": _breakdown(results, counts, ks),
        "warnings": warnings,
        "counts": {
            "problems": len(bench.problems),
            "samples": len(scored),
            "verdicts": dict(verdicts.most_common()),
            "harness_errors_excluded": sum(r["harness_errors"] for r in results),
            "problems_without_samples": len(missing_ids),
            "missing_policy": cfg.missing,
            "samples_ignored_outside_selection": ignored,
        },
        "timings": {
            "generate_s": round(timings["generate_s"], 3),
            "verify_s": round(timings["verify_s"], 3),
            "total_s": round(total, 3),
            "samples_per_s_verified": round(len(scored) / timings["verify_s"], 2)
            if timings["verify_s"] else None,
        },
    }
    return EvalRun(bench, results, scored, report)


def _sampling_info(cfg: EvalConfig, template, from_engine: bool, counts) -> dict:
    if not from_engine:
        ns = [n for n, _ in counts.values()]
        return {"from": "samples file (generation settings unknown to the evaluator)",
                "n_per_problem": {"min": min(ns), "max": max(ns)} if ns else None,
                "ks": list(cfg.ks), "greedy": cfg.greedy}
    s = cfg.sampling
    return {"n": cfg.n, "ks": list(cfg.ks), "temperature": s.temperature, "top_p": s.top_p,
            "max_new_tokens": s.max_new_tokens, "stop": list(s.stop), "seed": s.seed,
            "greedy": cfg.greedy, "template": template.describe() if template else None,
            "batch_problems": cfg.batch_problems}


def executor_info(executor, bench: BenchmarkSet | None = None, early_exit: bool = True) -> dict:
    c = executor.config
    d = {"backend": c.backend, "isolation": executor.isolation, "workers": c.workers,
         "memory_limit_mb_override": c.memory_limit_mb, "output_limit_mb": c.output_limit_mb,
         "max_sample_time_s": c.max_sample_time_s, "stdout_abs_tol": c.stdout_abs_tol,
         "stdout_rel_tol": c.stdout_rel_tol, "early_exit": early_exit}
    if bench is not None and bench.problems:
        tl = [p.time_limit_s for p in bench.problems]
        mem = [p.memory_limit_mb for p in bench.problems]
        d["time_limit_s"] = {"min": min(tl), "max": max(tl)}
        d["memory_limit_mb"] = {"min": min(mem), "max": max(mem)}
    return d
