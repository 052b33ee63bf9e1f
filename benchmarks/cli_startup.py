"""How long `selfplay` takes to reject bad input, and which heavy libraries it imported first.

Each case is a command a person mistypes (a bad config key, a missing file, an unknown id);
each runs `--repeats` times in a fresh interpreter, beside two references measured in the same
run (`python -c pass` and `python -c "import torch, transformers, prefect, mlflow"`), so the
ratios hold on a loaded machine where absolute times do not.

    python benchmarks/cli_startup.py [--repeats 5]

Prints, per case: median wall time, the ratio to a bare interpreter and to the heavy imports,
the exit status, and which of torch / transformers / prefect / mlflow were imported before the
command returned (there should be none: bad input is rejected before heavy work).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("torch", "transformers", "prefect", "mlflow", "datasets", "accelerate")
# Runs main() and reports (on the last stderr line) which heavy modules were loaded.
PROBE = ("import sys, json\nfrom selfplay_cli.main import main\ntry:\n    rc = main(sys.argv[1:])\n"
         "finally:\n    print('HEAVY=' + json.dumps([m for m in %r if m in sys.modules]), "
         "file=sys.stderr)\nsys.exit(rc)\n" % (HEAVY,))


def cases(tmp: Path) -> dict[str, list[str]]:
    bad = tmp / "bad.yaml"
    bad.write_text("iterations: 0\nteacher: {lemma_band: [0.9, 0.1]}\nfoo: 1\n")
    problems = tmp / "p.jsonl"
    problems.write_text('{"id": "a", "kind": "call", "entry_point": "f", "tests": []}\n')
    samples = tmp / "s.jsonl"
    samples.write_text('{"problem_id": "nope", "sample_id": "0", "code": "def f(): pass"}\n')
    return {
        "run: bad config file": ["run", "--config", str(bad)],
        "run: bad --set value": ["run", "--set", "learner.lr=-1"],
        "run: --dry-run (good config)": ["run", "--config", "configs/tiny-cpu.yaml", "--dry-run"],
        "evaluate: missing samples file": ["evaluate", "--benchmark", "humanevalplus", "--samples",
                                           str(tmp / "missing.jsonl"), "--out", str(tmp / "o")],
        "evaluate: k > n": ["evaluate", "--benchmark", "mbppplus", "--model", "toy", "--n", "1",
                            "--k", "1,8", "--out", str(tmp / "o")],
        "verify: unknown problem id": ["verify", "--problems", str(problems), "--samples",
                                       str(samples), "--out", str(tmp / "v.jsonl")],
        "serve: port taken": ["serve", "--dir", str(tmp / "serve"), "--prefect-port", "PORT",
                              "--mlflow-port", "PORT"],
        "--help": ["--help"],
    }


def timed(cmd: list[str], env: dict, cwd: Path) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    return time.perf_counter() - t0, out.returncode, out.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--checkout", default=str(Path(__file__).resolve().parents[1]),
                    help="the checkout whose code runs (e.g. another worktree, for a before/after)")
    args = ap.parse_args()
    root = Path(args.checkout).resolve()
    env = {**os.environ, "PYTHONPATH": str(root)}
    py = sys.executable
    import socket

    with tempfile.TemporaryDirectory() as tmp, socket.socket() as held:
        held.bind(("127.0.0.1", 0))  # a taken port for the serve case
        port = str(held.getsockname()[1])
        refs = {"python -c pass": [py, "-c", "pass"],
                "import torch, transformers, prefect, mlflow":
                    [py, "-c", "import torch, transformers, prefect, mlflow"]}
        rows = {}
        todo = {**{k: (v, None) for k, v in refs.items()},
                **{k: ([py, "-c", PROBE] + [port if a == "PORT" else a for a in v], k)
                   for k, v in cases(Path(tmp)).items()}}
        times: dict[str, list[float]] = {k: [] for k in todo}
        last: dict[str, tuple[int, str]] = {}
        for _ in range(args.repeats):  # interleaved, so load changes hit every case alike
            for name, (cmd, _) in todo.items():
                t, rc, err = timed(cmd, env, root)
                times[name].append(t)
                last[name] = (rc, err)
        bare = statistics.median(times["python -c pass"])
        heavy = statistics.median(times["import torch, transformers, prefect, mlflow"])
        print(f"{'case':<36} {'median s':>9} {'x bare':>7} {'/ heavy':>8}  rc  heavy modules imported")
        for name in todo:
            med = statistics.median(times[name])
            rc, err = last[name]
            imported = ""
            if todo[name][1] is not None:
                tail = [ln for ln in err.splitlines() if ln.startswith("HEAVY=")]
                imported = ", ".join(json.loads(tail[-1][6:])) if tail else "?"
                imported = imported or "none"
            print(f"{name:<36} {med:>9.2f} {med / bare:>7.1f} {med / heavy:>8.2f}  {rc:>2}  {imported}")
            rows[name] = med
        first_errors = {k: last[k][1].strip().splitlines()[0] for k in todo
                        if todo[k][1] is not None and last[k][0] == 2 and last[k][1].strip()}
        print("\nfirst error line per rejected case:")
        for k, v in first_errors.items():
            print(f"  {k}: {v[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
