"""selfplay data: the benchmark data, from its public releases or a local mirror, pinned by sha256."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("data", help="fetch HumanEval+, MBPP+, HumanEval, MBPP (and LiveCodeBench)",
                       description="Benchmark data from the public releases, each file checked "
                       "against its pinned sha256. Data root: $SELFPLAY_DATA, else "
                       "~/.cache/selfplay/data.")
    sp = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    f = sp.add_parser("fetch", help="download (or copy from --mirror) the pinned release files",
                      description="Put every pinned file under the data root, from its public "
                      "release (HTTPS) or from a local mirror laid out like the data root. A file "
                      "already there with the pinned hash is kept.")
    f.add_argument("datasets", nargs="*", metavar="DATASET",
                   help="humanevalplus, mbppplus, humaneval, mbpp (default: all)")
    f.add_argument("--to", help="data root to fill (default: $SELFPLAY_DATA or ~/.cache/selfplay/data)")
    f.add_argument("--mirror", help="copy from this local mirror instead of downloading")
    f.add_argument("--lcb-release", metavar="TAG",
                   help="also fetch this LiveCodeBench release (e.g. release_v5) from the "
                        "Hugging Face hub into its cache")
    f.add_argument("--timeout-s", type=float, default=60.0, help="per-download timeout (default 60)")
    f.set_defaults(func=run_fetch)
    s = sp.add_parser("sources", help="list the pinned public sources (no network)")
    s.set_defaults(func=run_sources)


def run_sources(args) -> int:
    from selfplay_core.datasets.sources import LCB_HUB, SOURCES

    for src in SOURCES:
        print(f"{src.rel:36} {src.version:26} {src.license:10} sha256 {src.sha256}\n    {src.url}")
    print(f"{'livecodebench (by --lcb-release)':36} {'release tag':26} {'see card':10} hub commit "
          f"recorded at load\n    {LCB_HUB}")
    return 0


def run_fetch(args) -> int:
    from selfplay_core.datasets.evalplus import data_root
    from selfplay_core.datasets.sources import DATASETS, fetch

    root = Path(args.to) if args.to else data_root()
    wanted = tuple(args.datasets) or DATASETS
    print(f"data root: {root.resolve()}")

    def said(f) -> None:
        what = {"present": "already there, sha256 ok", "mirror": f"copied from {args.mirror}, sha256 ok",
                "download": f"downloaded from {f.source.url}, sha256 ok"}[f.how]
        print(f"  {f.source.rel}: {what}")

    fetch(root, wanted, mirror=Path(args.mirror) if args.mirror else None,
          timeout_s=args.timeout_s, on_file=said)
    if args.lcb_release:
        from selfplay_core.datasets.livecodebench import hub_paths

        paths, commit = hub_paths(args.lcb_release)
        print(f"  livecodebench {args.lcb_release}: {len(paths)} files at hub commit {commit} "
              f"({paths[0].parent})")
    return 0
