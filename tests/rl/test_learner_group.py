"""The multi-process learner (rl/distributed.py) against one process on the whole batch.

Three gloo ranks on CPU, spawned here, step the same tiny Qwen2 on batches whose shards are
uneven (7 rollouts: 2, 2, 3) or empty (2 rollouts: rank 0 gets none), under every loss
aggregation. The token normalisation is the whole batch's, so each rank's weights after two
PPO epochs equal the single-process learner's up to float32 reduction order, and the reduced
metrics (tokens, loss, mismatch) equal its metrics."""

import io
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from selfplay_core.rl.distributed import LearnerGroup
from selfplay_core.rl.learner import Learner, LearnerConfig, Rollout

WORLD = 3


def make_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg)


def batch(n: int) -> list[Rollout]:
    """n rollouts of different lengths and roles; old logprobs near the policy's (ratio ~ 1)."""
    g = torch.Generator().manual_seed(n)
    out = []
    for i in range(n):
        p = torch.randint(1, 32, (2 + i % 3,), generator=g).tolist()
        c = torch.randint(1, 32, (1 + (3 * i) % 5,), generator=g).tolist()
        old = (-3.4 + 0.1 * torch.randn(len(c), generator=g)).tolist()
        out.append(Rollout(p, c, old, advantage=float(i % 3) - 1.0 + 0.25 * i,
                           role="teacher" if i % 2 else "student"))
    return out


CONFIGS = {agg: dict(lr=1e-2, micro_batch_size=2, loss_agg=agg, max_grad_norm=0.5,
                     role_weights={"teacher": 0.5})
           for agg in ("token_mean", "seq_mean", "seq_sum_norm", "role_token_mean")}
# truncated importance sampling: later epochs take the ratio against the first epoch's learner
# logprobs, which each rank keeps on its own shard's rollouts
CONFIGS["token_mean+tis"] = dict(CONFIGS["token_mean"], tis_cap=1.5)


def single(agg: str, n: int):
    model = make_model()
    learner = Learner(model, LearnerConfig(**CONFIGS[agg]))
    metrics = learner.update(batch(n), epochs=2)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, metrics


def _rank(rank: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    group = LearnerGroup(rank, WORLD, torch.device("cpu"))
    try:
        for agg in CONFIGS:
            for n in (7, 2):
                model = make_model()
                learner = Learner(model, LearnerConfig(**CONFIGS[agg]), group=group)
                if rank == 0:
                    metrics = learner.update(batch(n), epochs=2)  # sends the batch to the others
                else:
                    message = group.receive()
                    assert message[0] == "update" and len(message[1]) == n and message[2] == 2
                    metrics = learner.update(message[1], epochs=message[2])
                buf = io.BytesIO()  # bytes: a tensor in the queue dies with this process
                torch.save(model.state_dict(), buf)
                queue.put((rank, agg, n, buf.getvalue(), metrics))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def group_results():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, queue)) for r in range(WORLD)]
    for p in procs:
        p.start()
    results = {}
    for _ in range(WORLD * len(CONFIGS) * 2):
        rank, agg, n, state, metrics = queue.get(timeout=300)
        results[(rank, agg, n)] = (torch.load(io.BytesIO(state)), metrics)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return results



def test_shard_bounds_cover_the_batch_once():
    bounds = [LearnerGroup(r, 3, torch.device("cpu")).shard(7) for r in range(3)]
    assert bounds == [(0, 2), (2, 4), (4, 7)]
    assert [LearnerGroup(r, 3, torch.device("cpu")).shard(2) for r in range(3)] == [(0, 0), (0, 1), (1, 2)]


@pytest.mark.parametrize("n", [7, 2])
@pytest.mark.parametrize("agg", list(CONFIGS))
def test_every_rank_ends_with_the_single_process_weights_and_metrics(group_results, agg, n):
    want, want_metrics = single(agg, n)
    start = {k: v for k, v in make_model().state_dict().items()}
    moved = max(float((want[k] - start[k]).abs().max()) for k in want)
    assert moved > 1e-3  # the update did something the comparison can see
    for rank in range(WORLD):
        state, metrics = group_results[(rank, agg, n)]
        for k in want:
            if k.endswith("k_proj.bias"):
                # its gradient is zero in exact arithmetic (softmax does not change when q.b_k is
                # added to every score of a row); AdamW divides round-off by round-off, so its
                # step is +-lr in a direction the summation order decides
                continue
            # summation order only: within a thousandth of one AdamW step (lr)
            torch.testing.assert_close(state[k], want[k], rtol=0, atol=1e-3 * CONFIGS[agg]["lr"])
        assert metrics["learner/tokens"] == want_metrics["learner/tokens"]
        assert metrics["learner/rollouts"] == n
        keys = ["learner/loss", "learner/pg_loss_per_token", "learner/grad_norm",
                "mismatch/ratio_mean", "mismatch/ratio_max", "mismatch/ratio_min",
                "mismatch/logprob_abs_diff_max", "mismatch/tokens"]
        if "tis" in agg:
            keys += ["learner/tis_weight_mean", "learner/tis_truncated_frac"]
        for key in keys:
            assert metrics[key] == pytest.approx(want_metrics[key], rel=1e-5, abs=1e-7), key
