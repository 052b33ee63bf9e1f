"""The work of the evaluation and goalpost-mining deployments, without Prefect: a checkpoint
(path or stored prefix) scored on the toy benchmark into a report and an MLflow run; goalposts
mined into a JSON set and an MLflow run; bad input is one clear error."""

from __future__ import annotations

import json

import pytest


def test_checkpoint_eval_writes_report_and_mlflow_run(tmp_path):
    from mlflow.tracking import MlflowClient

    from selfplay_core.checkpoint_eval import CheckpointEvalConfig, run_checkpoint_eval
    from selfplay_core.storage import open_store
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    # A checkpoint stored by the artifact store (a file:// prefix here; s3:// the same way).
    store = open_store((tmp_path / "store").as_uri())
    store.put_dir(str(ASSET_DIR), "run-1/ckpt-0")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cfg = CheckpointEvalConfig(checkpoint=(tmp_path / "store" / "run-1" / "ckpt-0").as_uri(),
                               n=2, ks=[1, 2], max_problems=3, out_dir=str(tmp_path / "eval"),
                               mlflow_uri=uri, run_name="ev", sandbox={"workers": 1})
    out = run_checkpoint_eval(cfg)
    report = json.loads((tmp_path / "eval" / "ev" / "toy" / "report.json").read_text())
    assert report["dataset"]["problems"] == 3 and set(report["metrics"]) >= {"pass@1", "pass@2"}
    assert 0.0 <= report["metrics"]["pass@1"] <= report["metrics"]["pass@2"] <= 1.0
    lines = (tmp_path / "eval" / "ev" / "toy" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(ln)["n"] == 2 for ln in lines)
    run = MlflowClient(uri).get_run(out["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["kind"] == "evaluation"
    assert run.data.metrics["toy/pass_at_1"] == report["metrics"]["pass@1"]
    assert run.data.params["n"] == "2"
    arts = [a.path for a in MlflowClient(uri).list_artifacts(out["run_id"], "toy")]
    assert arts == ["toy/report.json"]


def test_goalpost_mining_writes_set_and_mlflow_run(tmp_path):
    from mlflow.tracking import MlflowClient

    from selfplay_core.mining import GoalpostMiningConfig, run_mining

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cfg = GoalpostMiningConfig(k=2, chunk=2, max_candidates=3, out_dir=str(tmp_path / "gp"),
                               mlflow_uri=uri, run_name="gp", sandbox={"workers": 1})
    out = run_mining(cfg)
    data = json.loads((tmp_path / "gp" / "gp" / "goalposts.json").read_text())
    assert data["summary"]["candidates"] == 3 and len(data["candidates"]) == 3
    # A goalpost is a candidate that k samples all failed.
    assert data["ids"] == [pid for pid, c in data["candidates"].items() if c["passes"] == 0]
    assert all(c["samples"] == 2 for pid, c in data["candidates"].items() if pid in data["ids"])
    assert out["cache"] is None  # a subset of the pool never stands in for a run's own mining
    run = MlflowClient(uri).get_run(out["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.metrics["goalposts/count"] == len(data["ids"])
    assert [a.path for a in MlflowClient(uri).list_artifacts(out["run_id"])] == ["goalposts.json"]


def test_loop_compatibility_and_cache_key():
    from selfplay_core.mining import GoalpostMiningConfig, goalpost_cache_path, loop_compatible
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    assert loop_compatible(GoalpostMiningConfig())
    assert not loop_compatible(GoalpostMiningConfig(max_candidates=5))
    assert not loop_compatible(GoalpostMiningConfig(temperature=0.5))
    p = goalpost_cache_path(ASSET_DIR, 3, 64)
    assert p.parent.name == "goalposts" and p.name.endswith("-w3-k64.json")
    # The very key a self-play run on the toy world reads (loop.worlds.select_goalposts).
    from selfplay_core.loop.worlds import weights_key
    assert p.name == f"{weights_key(ASSET_DIR)}-w3-k64.json"


def test_bad_checkpoints_and_parameters_are_one_clear_error(tmp_path):
    from pydantic import ValidationError

    from selfplay_core.checkpoint_eval import CheckpointEvalConfig, resolve_checkpoint
    from selfplay_core.mining import resolve_model
    from selfplay_core.problems import InputError

    with pytest.raises(InputError, match="no config.json"):
        resolve_checkpoint(str(tmp_path), tmp_path)
    with pytest.raises(InputError, match="s3://bucket/key"):
        resolve_checkpoint("s3://bucket-only", tmp_path)
    with pytest.raises(InputError, match="model_path"):
        resolve_model(str(tmp_path / "missing"))
    with pytest.raises(ValidationError, match="ks must lie"):
        CheckpointEvalConfig(n=2, ks=[4])
    with pytest.raises(ValidationError, match="benchmarks"):
        CheckpointEvalConfig(benchmarks=[])


def test_a_benchmark_that_does_not_fit_the_checkpoint_is_refused_before_anything_starts(tmp_path, monkeypatch):
    """HumanEval+ on the toy model: its prompts (the longest measured here with the toy
    tokenizer) + 1024 new tokens exceed the 512-token window. One InputError, raised before the
    MLflow run, the engine or any expected output exists (the cache stays empty)."""
    import json as _json

    from mlflow.tracking import MlflowClient
    from tokenizers import Tokenizer

    from selfplay_core.datasets.evalplus import load_humanevalplus
    from selfplay_core.checkpoint_eval import CheckpointEvalConfig, run_checkpoint_eval
    from selfplay_core.problems import InputError
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    window = _json.loads((ASSET_DIR / "config.json").read_text())["max_position_embeddings"]
    tok = Tokenizer.from_file(str(ASSET_DIR / "tokenizer.json"))
    problems, _ = load_humanevalplus()
    lengths = [len(tok.encode(p.prompt, add_special_tokens=False).ids) for p in problems[:20]]
    over = sum(1 for n in lengths if n + 1024 > window)
    assert over == 20  # every one: 1024 new tokens alone exceed the window

    monkeypatch.setenv("SELFPLAY_CACHE", str(tmp_path / "cache"))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cfg = CheckpointEvalConfig(checkpoint="toy", benchmarks=["toy", "humanevalplus"], n=2, ks=[1, 2],
                               max_problems=20, out_dir=str(tmp_path / "eval"), mlflow_uri=uri,
                               run_name="ev", sandbox={"workers": 1})
    with pytest.raises(InputError) as e:
        run_checkpoint_eval(cfg)
    msg = str(e.value)
    assert msg.startswith(f"humanevalplus: {over} of 20 prompts do not fit checkpoint toy: the "
                          f"longest is {max(lengths)} tokens, + max_new_tokens 1024 > its context "
                          f"of {window} tokens (max_new_tokens <= {window - max(lengths)} would fit")
    assert "leave humanevalplus out" in msg
    assert not (tmp_path / "cache").exists()
    assert not (tmp_path / "eval" / "ev" / "toy").exists()  # the toy benchmark did not run first
    assert MlflowClient(uri).search_experiments(filter_string="name = 'selfplay-eval'") == []
    # With room for the prompts the same benchmark is accepted by the check.
    from selfplay_core.checkpoint_eval import check_benchmarks_fit
    check_benchmarks_fit(cfg.model_copy(update={"max_new_tokens": window - max(lengths)}), ASSET_DIR)


def test_expected_output_progress_says_what_it_computes_and_each_quarter():
    from selfplay_core.checkpoint_eval import expected_output_progress

    lines = []
    on_compute, progress = expected_output_progress("mbppplus", lines.append)
    on_compute(10)
    for _ in range(10):
        progress(1)
    assert lines[0].startswith("mbppplus: computing the expected outputs of 10 problems")
    # Quarters of 10: 2.5, 5, 7.5, 10 -> logged at 3, 5, 8 and 10 done.
    assert lines[1:] == [f"mbppplus: expected outputs {n}/10" for n in (3, 5, 8, 10)]
    lines.clear()
    on_compute, progress = expected_output_progress("mbppplus", lines.append)
    on_compute(0)  # all cached: nothing to say
    assert lines == []
