"""A rank other than 0 of a multi-process learner (gpu.distributed: ddp, rl/distributed.py): it
runs no loop, writes nothing (no run folder, MLflow or checkpoint) and only learns. It waits for
rank 0's messages: "start" (build the learner replica on the weights rank 0 starts from: the
configured model, or a checkpoint on resume; the folder must be readable here, one node or a
shared file system), "update" (this rank's shard of the update), "stop" (return)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

log = logging.getLogger(__name__)


def follow(cfg) -> int:
    import torch
    from transformers import AutoTokenizer

    from selfplay_core.loop.context import learner_group, make_learner
    from selfplay_core.rl import distributed

    group = learner_group(cfg)
    if group is None or group.is_leader:
        raise RuntimeError("follow() is for ranks other than 0 of a learner group")
    if cfg.model.torch_threads:
        torch.set_num_threads(cfg.model.torch_threads)
    learner = None
    updates = 0
    try:
        while True:
            message = group.receive()
            kind = message[0]
            if kind == "start":
                model_dir, resume = Path(message[1]), bool(message[2])
                torch.manual_seed(cfg.seed)
                tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
                learner = make_learner(cfg, model_dir, tokenizer, resume, group=group)
                log.info("rank %d: learner replica on %s", group.rank, model_dir)
            elif kind == "update":
                if learner is None:
                    raise RuntimeError(f"rank {group.rank}: an update before the learner started")
                learner.update(message[1], epochs=message[2])
                updates += 1
            elif kind == "stop":
                # one line on stderr (the launcher's log): what this rank did
                print(f"selfplay learner rank {group.rank} of {group.world_size}: {updates} "
                      "updates, stopped by rank 0", file=sys.stderr, flush=True)
                return 0
            else:
                raise RuntimeError(f"rank {group.rank}: unknown message {kind!r} from rank 0")
    finally:
        distributed._GROUP = None
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
