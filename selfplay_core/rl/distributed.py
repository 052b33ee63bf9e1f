"""The learner as a group of processes (`gpu.distributed: ddp`), launched by torchrun or
`accelerate launch`: rank 0 runs the whole loop (generation, verification, scoring, MLflow,
checkpoints, weight pushes) and every other rank is a follower that only learns.

At an update rank 0 sends the whole batch to every rank by a collective (a pickled broadcast on a
gloo group, so a follower that waits for minutes while rank 0 generates holds no GPU collective
open). Every rank computes each rollout's loss scale on the whole batch, then the loss of its own
contiguous shard; gradients are summed by all-reduce. The scales are the single-process ones, so
the summed gradient is the gradient of the loss one process computes on the whole batch, whatever
the shard sizes (a shard may even be empty). Every rank then clips and steps the same summed
gradient with the same AdamW, so the replicas stay equal without a weight broadcast.

The model is not wrapped in torch's DistributedDataParallel: DDP's hooks all-reduce at every
backward and need the same number of micro-batches on every rank, which uneven shards do not
have. One all-reduce per optimizer step, over buckets of the flattened gradients, is what DDP
with `no_sync` on all but the last micro-batch would do.

Messages from rank 0: ("start", model_dir, resume) builds a follower's learner (a run starts or
resumes), ("update", rollouts, epochs) one update, ("stop",) the end.
"""

from __future__ import annotations

import datetime
import os
from typing import Sequence

import torch
import torch.distributed as dist

from selfplay_core.engines.gpu_config import launched_rank  # torch-free: the CLI reads it early

# A follower waits in a broadcast while rank 0 generates and evaluates (minutes to hours on a 7B
# model): the default 30-minute collective timeout would end a healthy run.
WAIT = datetime.timedelta(hours=24)
BUCKET_BYTES = 64 << 20   # gradients are all-reduced in flat buckets of about this size


class LearnerGroup:
    """This process's place in the learner group, and the collectives the learner uses."""

    def __init__(self, rank: int, world_size: int, device: torch.device, control=None):
        self.rank, self.world_size, self.device = rank, world_size, device
        self.control = control  # the gloo group that carries messages (None: the default group)

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    # ---- messages --------------------------------------------------------------------------
    def send(self, *message) -> None:
        if not self.is_leader:
            raise RuntimeError("only rank 0 sends to the learner group")
        dist.broadcast_object_list([message], src=0, group=self.control)

    def receive(self) -> tuple:
        box = [None]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    # ---- the update's collectives -----------------------------------------------------------
    def shard(self, n: int) -> tuple[int, int]:
        """[start, stop) of this rank's contiguous share of n rows (sizes differ by at most 1)."""
        return (n * self.rank) // self.world_size, (n * (self.rank + 1)) // self.world_size

    @torch.no_grad()
    def broadcast_parameters(self, params: Sequence[torch.Tensor]) -> None:
        """Rank 0's values into every rank's copy (the replicas start equal)."""
        for p in params:
            dist.broadcast(p.data, src=0)

    @torch.no_grad()
    def sum_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Every rank's `.grad` becomes the sum over ranks (a rank without a micro-batch adds
        zeros), all-reduced in flat buckets of one dtype."""
        grads = []
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        bucket: list[torch.Tensor] = []
        size = 0
        for g in grads:
            if bucket and (g.dtype != bucket[0].dtype or size + g.numel() * g.element_size() > BUCKET_BYTES):
                self._reduce_bucket(bucket)
                bucket, size = [], 0
            bucket.append(g)
            size += g.numel() * g.element_size()
        if bucket:
            self._reduce_bucket(bucket)

    @staticmethod
    def _reduce_bucket(bucket: list[torch.Tensor]) -> None:
        flat = torch.cat([g.reshape(-1) for g in bucket])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for g in bucket:
            n = g.numel()
            g.copy_(flat[offset:offset + n].view_as(g))
            offset += n

    def reduce(self, values: Sequence[float], op: str = "sum") -> list[float]:
        """Scalars reduced over the ranks (sum, max or min), in float64."""
        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                               "min": dist.ReduceOp.MIN}[op])
        return t.cpu().tolist()


_GROUP: LearnerGroup | None = None


def join(device: str = "cpu") -> LearnerGroup | None:
    """Join the learner group of this launch (once per process; None for a single process).
    gloo on CPU, NCCL on CUDA (rank r on cuda:LOCAL_RANK); messages always go over gloo."""
    global _GROUP
    if _GROUP is not None:
        return _GROUP
    launch = launched_rank()
    if launch is None:
        return None
    rank, world, local = launch
    if device == "cuda":
        torch.cuda.set_device(local)
        where = torch.device("cuda", local)
        backend = "nccl"
    else:
        where, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=WAIT)
    control = dist.new_group(backend="gloo", timeout=WAIT) if backend != "gloo" else None
    _GROUP = LearnerGroup(rank, world, where, control)
    return _GROUP


def current() -> LearnerGroup | None:
    return _GROUP


def stop_followers() -> None:
    """Rank 0 at the end of a run (or its failure): the followers leave their loop and exit."""
    global _GROUP
    group = _GROUP
    if group is None:
        return
    _GROUP = None
    try:
        if group.is_leader:
            group.send("stop")
    except (RuntimeError, OSError):
        pass  # a rank is gone (the run is failing already): the launcher ends the others
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
