"""selfplay evaluate: score a model (or a samples file) on a benchmark with unbiased pass@k."""

from __future__ import annotations

import sys

from selfplay_cli._common import add_sandbox_options, progress_bar, sandbox_config

BENCHMARKS = ["humanevalplus", "mbppplus", "lcb", "humaneval", "mbpp"]


def register(sub) -> None:
    p = sub.add_parser(
        "evaluate", help="pass@k of a model or a samples file on a benchmark",
        description="Generate (or read) samples, verify them in the sandbox and report unbiased "
        "pass@k and greedy pass@1, with the dataset's version and content hash, the sampling and "
        "executor settings and timings. Writes report.json, results.jsonl/.csv, samples.jsonl "
        "and summary.csv into --out.")
    p.add_argument("--benchmark", required=True, choices=BENCHMARKS)
    p.add_argument("--data", help="benchmark file (LCB: a JSONL file or a directory of the official "
                   "testN.jsonl files); default: $SELFPLAY_DATA or the data `selfplay data fetch` downloaded")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="model folder (Hugging Face format), generated with the hf engine")
    src.add_argument("--samples", help="samples JSONL: {problem_id, sample_id, code}; sample_id "
                     "'greedy' marks a greedy sample")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--n", type=int, default=None, help="samples per problem (model: default 1; "
                   "samples file: use exactly the first N of each problem)")
    p.add_argument("--k", default="1", help="comma-separated k values for pass@k (default 1)")
    p.add_argument("--greedy", action="store_true", help="also score one greedy sample per problem "
                   "(model: generated at temperature 0; samples file: sample_id 'greedy')")
    p.add_argument("--ids", help="only these problem ids (comma-separated, or @FILE with one per line)")
    p.add_argument("--missing", choices=["error", "zero"], default="error",
                   help="a problem with no samples: fail (default) or score it as all-wrong")
    p.add_argument("--all-tests", action="store_true",
                   help="run every test of a sample (default: stop at the first failure)")
    g = p.add_argument_group("LiveCodeBench")
    g.add_argument("--release", help="hub release tag (release_v1 .. release_v6, release_latest, "
                   "v1 .. v6); with --data: which official files of the directory to read")
    g.add_argument("--window", choices=["test", "train", "all"], default=None,
                   help="contest-date window: test = 2024-08-01..2025-02-01 (default unless "
                   "--date-from/--date-to are given), train = before 2024-08-01")
    g.add_argument("--date-from", help="first contest date included (YYYY-MM-DD)")
    g.add_argument("--date-to", help="first contest date excluded (YYYY-MM-DD)")
    g.add_argument("--platform", help="comma-separated: leetcode, atcoder, codeforces")
    g.add_argument("--difficulty", help="comma-separated: easy, medium, hard")
    g.add_argument("--tests", choices=["all", "public", "private"], default="all",
                   help="which LCB tests to use (default all: public + private where present)")
    g.add_argument("--lcb-time-limit", type=float, default=None,
                   help="seconds per LCB test (default 6, as LiveCodeBench's runner)")
    s = p.add_argument_group("generation (with --model)")
    s.add_argument("--prompt-template", help="plain | instruct | a template file "
                   "(default: plain; instruct for lcb)")
    s.add_argument("--temperature", type=float, default=0.8)
    s.add_argument("--top-p", type=float, default=0.95)
    s.add_argument("--max-new-tokens", type=int, default=1024)
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--stop", action="append", default=[], help="stop sequence (repeatable)")
    s.add_argument("--batch-problems", type=int, default=8, help="problems per generate call")
    add_sandbox_options(p)
    p.set_defaults(func=run)


def _split(text):
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def _ids(spec):
    from selfplay_cli._common import CLIError

    if not spec:
        return None
    if spec.startswith("@"):
        try:
            with open(spec[1:], encoding="utf-8") as f:
                return [line.strip() for line in f if line.strip()]
        except OSError as e:
            raise CLIError(f"--ids {spec}: {e.strerror}") from None
    return _split(spec)


def make_engine(model_path: str):
    """The hf engine, imported only here: it pulls in torch and transformers."""
    from selfplay_cli._common import CLIError

    try:
        from selfplay_core.engines.hf import HFEngine
    except ImportError as e:
        raise CLIError(f"--model needs the hf engine (selfplay_core.engines.hf.HFEngine), which "
                       f"could not be imported: {e}. Use --samples, or install the engine.") from None
    try:
        return HFEngine(model_path)
    except Exception as e:  # a missing folder, a broken config, an unknown architecture
        raise CLIError(f"--model {model_path}: could not load the model "
                       f"({type(e).__name__}: {str(e)[:300]})") from None


def _check_model_path(model: str) -> None:
    """--model as a local path (absolute, ./, ../, ~ or existing) must be a model folder: said
    now, not after the expected outputs are computed. Anything else is a hub id, loaded later."""
    import os

    from selfplay_cli._common import CLIError

    local = os.path.isabs(model) or model.startswith((".", "~")) or os.path.exists(model)
    folder = os.path.expanduser(model)
    if local and not os.path.isfile(os.path.join(folder, "config.json")):
        what = "is not a model folder (no config.json)" if os.path.exists(folder) else "does not exist"
        raise CLIError(f"--model {model}: {what}; give a Hugging Face model folder "
                       "(save_pretrained) or a hub id")


def _lcb_options(args) -> dict:
    from selfplay_cli._common import CLIError

    opts = {"release": args.release, "platforms": _split(args.platform),
            "difficulties": _split(args.difficulty), "tests": args.tests}
    if args.date_from or args.date_to:
        if args.window:
            raise CLIError("give either --window or --date-from/--date-to, not both")
        opts.update(date_from=args.date_from, date_to=args.date_to)
    else:
        opts["window"] = args.window or "test"
    if args.lcb_time_limit is not None:
        if args.lcb_time_limit <= 0:
            raise CLIError("--lcb-time-limit must be > 0")
        opts["time_limit_s"] = args.lcb_time_limit
    return opts


def _check_lcb_only(args) -> None:
    from selfplay_cli._common import CLIError

    used = [flag for flag, v in (("--release", args.release), ("--window", args.window),
                                 ("--date-from", args.date_from), ("--date-to", args.date_to),
                                 ("--platform", args.platform), ("--difficulty", args.difficulty),
                                 ("--lcb-time-limit", args.lcb_time_limit)) if v]
    if args.tests != "all":
        used.append("--tests")
    if used:
        raise CLIError(f"{', '.join(used)} apply to --benchmark lcb only")


def print_summary(run, out_paths: dict, stream=None) -> None:
    from rich.console import Console
    from rich.table import Table

    from selfplay_core.evaluation.report import summary_rows

    rep = run.report
    d = rep["dataset"]
    console = Console(file=stream or sys.stdout)
    t = Table(title=f"{d['name']} · {d['version']} · content {d['content_hash'][:12]}")
    for col, just in (("group", "left"), ("value", "left"), ("problems", "right"),
                      ("metric", "left"), ("score", "right")):
        t.add_column(col, justify=just)
    for r in summary_rows(run):
        t.add_row(r["group"], str(r["value"]), str(r["n_problems"]), r["metric"],
                  f"{100 * r['score']:.2f}%")
    console.print(t)
    c, tm, ex = rep["counts"], rep["timings"], rep["executor"]
    verdicts = ", ".join(f"{k} {v}" for k, v in c["verdicts"].items())
    console.print(f"{c['samples']} samples ({verdicts}); isolation={ex['isolation']}, "
                  f"workers={ex['workers']}; generate {tm['generate_s']:.1f}s, verify "
                  f"{tm['verify_s']:.1f}s, total {tm['total_s']:.1f}s", highlight=False)
    skipped = d["skipped"]
    if skipped or c["samples_ignored_outside_selection"]:
        console.print(f"skipped while loading: {skipped or 'none'}; samples ignored (outside the "
                      f"selection): {c['samples_ignored_outside_selection']}", highlight=False)
    for note in d["notes"]:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    for w in rep["warnings"]:
        console.print(f"[yellow]warning:[/] {w}", highlight=False, soft_wrap=True)
    console.print(f"-> {out_paths['report']}", highlight=False)


def _check_sample_ids(benchmark: str, samples, problems, where: str) -> None:
    """Unknown problem ids in a samples file, against the whole benchmark (as `evaluate`
    would find them, but before its expected outputs are computed)."""
    from selfplay_core.problems import InputError

    known = {p.id for p in problems}
    for k, s in enumerate(samples, 1):
        if str(s.problem_id) not in known:
            raise InputError(f"{where}: sample #{k} (sample_id {s.sample_id!r}): field 'problem_id': "
                             f"unknown problem {s.problem_id!r} for {benchmark} (ids look like "
                             f"{problems[0].id if problems else '?'!r})")


def _check_fit(args, problems, cfg, tokenizer=None) -> None:
    """--model: every selected prompt plus --max-new-tokens fits the model's context."""
    from selfplay_core.evaluation.fit import check_prompts_fit, context_window, load_tokenizer

    window = context_window(args.model)
    if window is None:
        return
    ids = _ids(args.ids)
    if ids is not None:
        wanted = set(ids)
        problems = [p for p in problems if p.id in wanted]
    check_prompts_fit(args.benchmark, problems, cfg.template, tokenizer=tokenizer or load_tokenizer(args.model),
                      window=window, max_new_tokens=cfg.sampling.max_new_tokens, checkpoint=args.model)


def run(args) -> int:
    from selfplay_cli._common import CLIError
    from selfplay_core.datasets.registry import load_benchmark
    from selfplay_core.evaluation.passk import PassAtKError, parse_ks
    from selfplay_core.evaluation.report import write_outputs
    from selfplay_core.evaluation.fit import prompt_problems
    from selfplay_core.evaluation.runner import EvalConfig, HarnessFailure, evaluate
    from selfplay_core.output_paths import ensure_output_dir
    from selfplay_core.problems import load_samples
    from selfplay_core.sandbox import Executor

    try:
        ks = parse_ks(args.k)
    except PassAtKError as e:
        raise CLIError(f"--k: {e}") from None
    if args.model:
        _check_model_path(args.model)
    if args.n is not None and (args.n < 0 or (args.samples and args.n == 0)):
        raise CLIError("--n must be >= 0 (>= 1 with --samples)")
    lcb = _lcb_options(args) if args.benchmark == "lcb" else {}
    if args.benchmark != "lcb":
        _check_lcb_only(args)
    samples = load_samples(args.samples) if args.samples else None
    engine = None
    cfg_kw = dict(ks=ks, greedy=args.greedy, missing=args.missing, early_exit=not args.all_tests,
                  batch_problems=args.batch_problems)
    if args.model:
        from selfplay_core.engines.base import SamplingParams
        from selfplay_core.evaluation.prompts import get_template

        n = 1 if args.n is None else args.n
        if n and max(ks) > n:
            raise CLIError(f"--k {max(ks)} needs --n >= {max(ks)} (got --n {n})")
        cfg_kw.update(n=n, template=get_template(args.prompt_template, args.benchmark),
                      sampling=SamplingParams(temperature=args.temperature, top_p=args.top_p,
                                              max_new_tokens=args.max_new_tokens,
                                              stop=tuple(args.stop), seed=args.seed))
    else:
        cfg_kw.update(samples_per_problem=args.n)
    cfg = EvalConfig(**cfg_kw)

    # Input errors first, before expected outputs are computed (a minute on first use) or a
    # model is loaded: unknown sample ids, prompts that do not fit the model's context.
    # (LCB's problems are read, not computed: they are checked once loaded, as HumanEval/MBPP.)
    raw = prompt_problems(args.benchmark, args.data) if args.benchmark.endswith("plus") else None
    if raw is not None and samples is not None:
        _check_sample_ids(args.benchmark, samples, raw, args.samples)
    if raw is not None and args.model:
        _check_fit(args, raw, cfg)
    ensure_output_dir(args.out, "--out")  # before samples are drawn and verified, not after
    with Executor(sandbox_config(args)) as ex:
        bar = None

        def on_compute(n: int) -> None:
            nonlocal bar
            if n:
                print(f"{args.benchmark}: computing the expected outputs of {n} problems (their "
                      "canonical solutions run once in the sandbox; cached for the next time) ...",
                      file=sys.stderr, flush=True)
                bar = progress_bar(n, f"{args.benchmark}: expected outputs", unit="problem")

        bench = load_benchmark(args.benchmark, args.data, executor=ex, on_compute=on_compute,
                               progress=lambda k: bar.update(k) if bar is not None else None,
                               ids=_ids(args.ids), **lcb)
        if bar is not None:
            bar.close()
        if args.model:
            engine = make_engine(args.model)
            if raw is None:  # LCB, HumanEval, MBPP: checked now that they are loaded
                _check_fit(args, bench.problems, cfg, engine.tokenizer)
            total = len(bench.problems) * (cfg.n + (1 if cfg.greedy else 0))
            source = {"model": args.model, "engine": type(engine).__name__}
        else:
            total = len(samples)
            from selfplay_core.datasets.evalplus import file_sha256
            source = {"samples_file": args.samples, "samples_sha256": file_sha256(args.samples)}
        bar = progress_bar(total, f"{args.benchmark}: verify")
        try:
            result = evaluate(bench, ex, cfg, engine=engine, samples=samples,
                              samples_source=args.samples or "samples", source_info=source,
                              progress=bar.update)
        except (PassAtKError, HarnessFailure) as e:
            raise CLIError(str(e)) from None
        finally:
            bar.close()
    paths = write_outputs(result, args.out)
    print_summary(result, paths)
    return 0
