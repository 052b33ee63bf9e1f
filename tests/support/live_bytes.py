"""Peak bytes of live tensor storage while a block runs, on any device (CPU included), counted
from every storage an aten op returns: a memory model can be checked on a CPU-only machine."""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    """`with LiveBytes() as m: ...` -> `m.peak` (bytes above what was live on entry), `m.now`.
    Storages allocated before entry are not counted; one freed inside stops counting when its
    last reference dies (a weakref finalizer on the storage object)."""

    def __init__(self):
        super().__init__()
        self._live: dict[int, int] = {}
        self.now = 0
        self.peak = 0

    def _track(self, t: torch.Tensor) -> None:
        s = t.untyped_storage()
        key, n = s.data_ptr(), s.nbytes()
        if n == 0 or key in self._live:
            return
        self._live[key] = n
        self.now += n
        self.peak = max(self.peak, self.now)
        weakref.finalize(s, self._gone, key)

    def _gone(self, key: int) -> None:
        n = self._live.pop(key, None)
        if n is not None:
            self.now -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self._track(t)
        return out
