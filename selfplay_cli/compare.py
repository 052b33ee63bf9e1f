"""selfplay compare: runs side by side, as the MLflow UI would show them."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("compare", help="compare self-play runs (MLflow) side by side",
                       description="Print final/best metrics per run and goalposts solved (per run "
                       "and as the union over seeds of each method); optionally write a PNG.")
    p.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    p.add_argument("--tracking-uri", default=None,
                   help="MLflow tracking URI (default: the local store under runs/mlruns)")
    p.add_argument("--metrics", default=None, help="comma-separated metric names")
    p.add_argument("--png", help="write the curves of the first metric here")
    p.set_defaults(func=run)


def run(args) -> int:
    import os

    from selfplay_cli._common import CLIError
    from selfplay_core.output_paths import check_output_file
    from selfplay_core.tracking import compare
    from selfplay_core.tracking.mlflow_run import local_tracking_uri

    os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
    uri = args.tracking_uri or local_tracking_uri("runs/mlruns")
    metrics = tuple(m.strip() for m in args.metrics.split(",")) if args.metrics else compare.DEFAULT_METRICS
    if args.png:
        check_output_file(args.png, "--png")
    try:
        rows = compare.collect(uri, args.run_ids, metrics)
    except ValueError as e:
        raise CLIError(str(e)) from None
    print(compare.render_table(rows, metrics))
    if args.png:
        print(f"curves -> {compare.render_png(rows, args.png, metrics[0])}")
    return 0
