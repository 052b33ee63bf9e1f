"""selfplay verify: run untrusted samples against problems in the sandbox."""

from __future__ import annotations

import collections
import json

from selfplay_cli._common import add_sandbox_options, progress_bar, sandbox_config


def register(sub) -> None:
    p = sub.add_parser("verify", help="verify samples against problems (JSONL in, JSONL out)",
                       description="Verify code samples against problems in the sandbox. "
                       "Exit status 0 whenever the harness worked, whatever the verdicts.")
    p.add_argument("--problems", required=True, help="problems JSONL (id, kind, entry_point, tests, ...)")
    p.add_argument("--samples", required=True, help="samples JSONL (problem_id, sample_id, code)")
    p.add_argument("--out", required=True, help="verdicts JSONL to write")
    p.add_argument("--all-tests", action="store_true",
                   help="run every test even after a failure (default: stop at the first)")
    add_sandbox_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from selfplay_core.output_paths import check_output_file
    from selfplay_core.problems import InputError, load_problems, load_samples, write_jsonl
    from selfplay_core.sandbox import Executor

    check_output_file(args.out, "--out")
    problems = load_problems(args.problems)
    samples = load_samples(args.samples)
    for k, s in enumerate(samples):
        if s.problem_id not in problems:
            raise InputError(f"{args.samples}: sample #{k + 1} (sample_id {s.sample_id!r}): field "
                             f"'problem_id': unknown problem {s.problem_id!r} (not in {args.problems})")
    with Executor(sandbox_config(args)) as ex:
        bar = progress_bar(len(samples), "verify")
        verdicts = ex.verify([(problems[s.problem_id], s) for s in samples],
                             early_exit=not args.all_tests, progress=bar.update)
        bar.close()
        isolation = ex.isolation
    write_jsonl(args.out, (v.to_json() for v in verdicts))
    counts = collections.Counter(v.verdict.value for v in verdicts)
    n = len(verdicts)
    print(f"{n} samples, {len(problems)} problems, isolation={isolation} -> {args.out}")
    for name, c in counts.most_common():
        print(f"  {name:<15} {c:>7}  {c / n:7.1%}")
    print(json.dumps({"samples": n, "passed": counts.get("passed", 0),
                      "pass_rate": round(counts.get("passed", 0) / n, 4) if n else None}))
    return 0
