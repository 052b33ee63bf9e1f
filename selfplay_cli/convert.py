"""selfplay convert: write a benchmark as problems JSONL (expected outputs computed once)."""

from __future__ import annotations

from selfplay_cli._common import add_sandbox_options, progress_bar, sandbox_config


def register(sub) -> None:
    p = sub.add_parser("convert", help="write HumanEval+/MBPP+ as executor problems JSONL",
                       description="Convert an evalplus benchmark into the executor's problems "
                       "format, computing expected outputs by running the canonical solutions "
                       "once in the sandbox (cached).")
    p.add_argument("benchmark", choices=["humanevalplus", "mbppplus"])
    p.add_argument("--data", help="release file (default: $SELFPLAY_DATA or the data `selfplay data fetch` downloaded)")
    p.add_argument("--out", required=True, help="problems JSONL to write")
    p.add_argument("--canonical-out", help="also write the canonical solutions as samples JSONL")
    add_sandbox_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from selfplay_core.datasets.evalplus import file_sha256, load_humanevalplus, load_mbppplus
    from selfplay_core.datasets.expected import attach_expected
    from selfplay_core.output_paths import check_output_file
    from selfplay_core.problems import write_jsonl
    from selfplay_core.sandbox import Executor

    check_output_file(args.out, "--out")
    if args.canonical_out:
        check_output_file(args.canonical_out, "--canonical-out")
    loader = {"humanevalplus": load_humanevalplus, "mbppplus": load_mbppplus}[args.benchmark]
    problems, canon, path = loader(args.data, with_path=True)
    key = f"{args.benchmark}-{file_sha256(path)[:16]}"
    cfg = sandbox_config(args).model_copy(update={"max_sample_time_s": 3600.0})
    with Executor(cfg) as ex:
        bar = progress_bar(len(problems), f"{args.benchmark}: expected outputs")
        problems = attach_expected(problems, canon, dataset_key=key, executor=ex, progress=bar.update)
        bar.close()
    write_jsonl(args.out, (p.to_json() for p in problems))
    n_tests = sum(len(p.tests) for p in problems)
    print(f"{len(problems)} problems, {n_tests} tests -> {args.out}")
    if args.canonical_out:
        write_jsonl(args.canonical_out, ({"problem_id": p.id, "sample_id": "canonical",
                                          "code": canon[p.id]} for p in problems))
        print(f"canonical solutions -> {args.canonical_out}")
    return 0
