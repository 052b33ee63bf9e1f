"""overlap_generation: iteration t's update runs while iteration t+1 generates (overlap.py).
The schedule, the one-step lag, and exact resume of a run stopped with an update pending; on the
micro toy model with the hf engine (the engine does not matter to the schedule)."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from selfplay_core.config import load_config
from selfplay_core.loop.driver import run_selfplay

ASSET = Path(__file__).resolve().parents[1] / "selfplay_core" / "toyworld" / "assets" / "tiny-s0"


def sets(model_dir, out_dir, name, *extra):
    return [f"model.path={model_dir}", f"out_dir={out_dir}", "iterations=3",
            "method.goalposts_per_iteration=2", "method.proposals_per_anchor=2",
            "student.samples_per_task=4", "student.batch_size=32", "student.real_tasks_per_iteration=6",
            "method=gasp+rlvr", "eval.n=2", "eval.verdict_n=null", "eval.ks=[1, 2]", "eval.max_problems=4",
            "eval.goalpost_every=3", "eval.goalpost_k=2", "world.goalpost_k=2",
            "world.max_goalposts=3", "engine.max_new_tokens_teacher=64",
            "engine.max_new_tokens_student=24", "learner.lr=1e-3", "updates_per_iteration=2",
            f"tracking.run_name={name}", *extra]


def weights(path):
    return load_file(str(path / "model.safetensors"))


class Stop(Exception):
    pass


@pytest.mark.slow
def test_overlapped_updates_lag_one_iteration_and_resume_exactly(tmp_path, executor):
    from mlflow.tracking import MlflowClient

    micro_model_dir = ASSET  # the micro model solves nothing: no advantage, nothing to learn

    cfg = load_config(None, sets(micro_model_dir, tmp_path / "runs", "ov", "overlap_generation=true"))
    seen = {}

    def record(step, metrics):
        seen[step] = metrics

    ref = run_selfplay(cfg, executor=executor, on_iteration=record)
    # Iteration 1 has no update to wait for; 2 learns iteration 1's rollouts while it
    # generates; 3, the last, waits for 2's and then learns its own in line.
    assert "learner/loss" not in seen[1] and seen[1]["learner/student_rollouts"] > 0
    assert "time/update_wait_s" in seen[2] and "time/learner_s" in seen[2]
    assert "mismatch/logprob_abs_diff_mean" in seen[2]
    client = MlflowClient(ref.tracking_uri)
    steps = sorted(m.step for m in client.get_metric_history(ref.run_id, "learner/loss"))
    assert steps == [2, 3]
    state = (tmp_path / "runs" / "ov" / "state.json").read_text()
    assert '"pending_update": []' in state  # nothing left behind at the end
    final = weights(Path(ref.checkpoint))
    start = load_file(str(micro_model_dir / "model.safetensors"))
    assert any(not torch.equal(final[k], start[k]) for k in start)

    # The same run, stopped after iteration 1 (its rollouts pending in the state), resumed.
    cfg2 = load_config(None, sets(micro_model_dir, tmp_path / "runs", "ov2", "overlap_generation=true"))

    def stop_after_first(step, metrics):
        if step == 1:
            raise Stop

    with pytest.raises(Stop):
        run_selfplay(cfg2, executor=executor, on_iteration=stop_after_first)
    saved = json.loads((tmp_path / "runs" / "ov2" / "state.json").read_text())
    assert saved["iteration"] == 1 and saved["pending_update"]
    resumed = run_selfplay(cfg2, executor=executor, resume=True, run_dir=tmp_path / "runs" / "ov2")
    other = weights(Path(resumed.checkpoint))
    assert all(torch.equal(final[k], other[k]) for k in final)  # bit-identical


def test_overlap_and_a_sleeping_colocated_server_do_not_mix():
    from selfplay_core.config import ConfigError

    with pytest.raises(ConfigError, match="overlap_generation needs the server"):
        load_config(None, ["overlap_generation=true", "engine.backend=vllm",
                           "engine.vllm_url=http://127.0.0.1:8000", "model.path=m",
                           "gpu.engine=vllm", "gpu.vllm_placement=colocated",
                           "gpu.launch_server=true"])
