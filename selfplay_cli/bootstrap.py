"""selfplay bootstrap: build (or fetch from the cache) the toy world's tiny model."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("bootstrap", help="pretrain the toy world's tiny model (cached)",
                       description="Pretrain the tiny Qwen2-class model of the toy world on student, "
                       "teacher and Guide examples. The result is cached under $SELFPLAY_CACHE "
                       "(default ~/.cache/selfplay); a second run with the same settings returns at once.")
    p.add_argument("--config", default=None, metavar="RECIPE",
                   help="a bootstrap recipe (configs/toy/*.yaml): the model's settings and whether to "
                   "mine its goalposts, built end to end with deterministic kernels; bootstrap.json "
                   "records the recipe's and the weights' sha256. Not with the flags that set the model")
    p.add_argument("--seed", type=int, default=None, help="(default 0)")
    p.add_argument("--examples", type=int, default=None, help="corpus size (default 40000)")
    p.add_argument("--epochs", type=float, default=None)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default 1)")
    p.add_argument("--teacher-steps", type=int, default=None,
                   help="steps of the teacher phase after the main corpus (default 0: none; 2000 "
                   "made the teacher's variants faithful, see docs/toy-world.md)")
    p.add_argument("--out", default=None, help="write the model here instead of the cache")
    p.add_argument("--force", action="store_true", help="retrain even when cached")
    p.add_argument("--goalposts", action="store_true",
                   help="also mine the model's goalpost set (the embedded default's rule) and write "
                   "it into the model folder as goalposts.json, as the committed checkpoint ships it")
    p.add_argument("--no-prefect", action="store_true",
                   help="call the core function directly instead of running the Prefect flow")
    p.set_defaults(func=run)


# The flags a recipe (--config) sets instead, by their argparse names.
MODEL_FLAGS = ("seed", "examples", "epochs", "threads", "teacher_steps", "goalposts")


def _recipe(args):
    """(BootstrapConfig, mine goalposts?, extra bootstrap.json keys) from --config or the flags."""
    from selfplay_cli._common import CLIError

    if args.config is None:
        return _config(args), args.goalposts, None
    given = [f"--{f.replace('_', '-')}" for f in MODEL_FLAGS if getattr(args, f) not in (None, False)]
    if given:
        raise CLIError(f"--config {args.config} sets the model and its goalposts; drop "
                       f"{', '.join(given)} (or change the recipe)")
    from selfplay_core.toyworld.bootstrap import load_recipe

    try:
        recipe, meta = load_recipe(args.config)
    except ValueError as e:
        raise CLIError(str(e)) from None
    return recipe.model, recipe.goalposts, meta


def _config(args):
    from pydantic import ValidationError

    from selfplay_cli._common import CLIError
    from selfplay_core.toyworld.bootstrap import BootstrapConfig

    overrides = {"seed": 0 if args.seed is None else args.seed}
    for key, value in (("n_examples", args.examples), ("epochs", args.epochs), ("threads", args.threads),
                       ("teacher_steps", args.teacher_steps)):
        if value is not None:
            overrides[key] = value
    try:
        return BootstrapConfig(**overrides)
    except ValidationError as e:
        err = e.errors()[0]
        if not err["loc"]:   # a rule across fields
            raise CLIError(err["msg"]) from None
        flag = {"n_examples": "examples"}.get(err["loc"][0], str(err["loc"][0])).replace("_", "-")
        raise CLIError(f"--{flag}: {err['msg']}") from None


def run(args) -> int:
    config, goalposts, meta = _recipe(args)
    if args.out:  # before Prefect starts (the core function checks again, for other callers)
        from selfplay_core.toyworld.bootstrap import check_target

        check_target(args.out, force=args.force)
    if args.no_prefect:
        from selfplay_core.toyworld.bootstrap import bootstrap_toy_model

        path = bootstrap_toy_model(config, out_dir=args.out, force=args.force, extra_meta=meta)
    else:
        import os

        # Offline, no telemetry, and room for Prefect's ephemeral server to start on a busy box.
        for key, value in (("HF_HUB_OFFLINE", "1"), ("DO_NOT_TRACK", "true"),
                           ("PREFECT_SERVER_ANALYTICS_ENABLED", "false"),
                           ("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")):
            os.environ.setdefault(key, value)
        from flows.bootstrap_toy_model import bootstrap_toy_model

        path = bootstrap_toy_model(config=config, force=args.force, out_dir=args.out, extra_meta=meta)
    if goalposts:
        import logging
        import sys

        from selfplay_core.loop.worlds import ship_goalposts

        # Mining takes minutes: show its rounds (selfplay_core logs them at INFO).
        lib = logging.getLogger("selfplay_core.loop.worlds")
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        lib.addHandler(handler)
        lib.setLevel(logging.INFO)
        try:
            ship_goalposts(path, log=lambda m: print(m, file=sys.stderr))
        finally:
            lib.removeHandler(handler)
    print(path)
    return 0
