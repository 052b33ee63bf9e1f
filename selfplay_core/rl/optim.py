"""AdamW whose updates survive bf16 weights, and how much of a step reached the weights.

At the 7B recipe's lr 1e-6 Adam moves each weight by about lr (the moments normalise the step),
while bf16 weights of magnitude 0.01-0.05 are spaced 2^-14..2^-12 (6e-5..2.4e-4) apart: rounded to
nearest, almost every update is lost, so `torch.optim.AdamW` on bf16 parameters silently does not
learn (emulated on CPU: 96-99 % of the weights and all norm weights stay identical per step).
`LowPrecisionAdamW` computes every update in float32 and stores it in one of these ways:

- "master": a float32 master copy of every low-precision parameter and float32 moments; the bf16
  weight is the master rounded to nearest. The exact float32 AdamW trajectory; 16 bytes per
  parameter with the bf16 weight and gradient.
- "kahan": the bf16 weight plus a bf16 compensation buffer holding what rounding lost (Kahan
  summation; the pair carries ~16 mantissa bits). Deterministic; 10 bytes per parameter.
- "stochastic": the new value is rounded up or down at random with the probabilities that make
  its expectation exact (stochastic rounding). 8 bytes per parameter: what lets a 7B full
  fine-tune fit one 80 GB GPU. Each weight moves by one bf16 spacing with the probability
  update / spacing, so only ~1 % of the weights change per step at lr 1e-6, but the expected
  change is the float32 one (`update_visibility` ~ 1 where round-to-nearest gives ~0).
- "nearest": round to nearest everywhere (what torch's AdamW does on bf16): for the before/after
  comparison only, never chosen by a config.

Moments are float32 with "master" and bf16 otherwise, always written with stochastic rounding in
bf16: the second moment's average with beta2 = 0.999 moves by 0.1 % a step, below bf16's half
spacing (0.2 %), so it would freeze under round-to-nearest too. Float32 parameters get plain
float32 AdamW in every mode (the same operations as torch's AdamW with foreach=False). Random bits
come from a generator seeded by (seed, step, parameter, chunk): a resumed run takes the same steps.
Parameters are processed in chunks so the float32 temporaries stay small (a 7B model's embedding
alone is 545 M elements).
"""

from __future__ import annotations

import math
from typing import Iterable, Literal

import torch

Rounding = Literal["master", "kahan", "stochastic", "nearest"]
ROUNDINGS = ("master", "kahan", "stochastic", "nearest")
CHUNK = 1 << 22  # elements per float32 temporary (16 MiB)


def stochastic_round_bf16(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Round float32 `x` to bf16, up or down with probability proportional to the distance: add
    16 random bits below bf16's mantissa, then truncate them (the carry does the rounding)."""
    bits = x.contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, x.shape, dtype=torch.int32, device=x.device,
                          generator=generator)
    return ((bits + noise) & -65536).view(torch.float32).to(torch.bfloat16)


def _is_low(p: torch.Tensor) -> bool:
    return p.is_floating_point() and p.dtype != torch.float32 and p.dtype != torch.float64


class LowPrecisionAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay, bias-corrected moments) for bf16 parameters; see the
    module docstring for `rounding`. After each step `last_changed_share` is the share of
    trainable elements whose training value (the master, the weight + compensation, or the
    weight) changed, and `last_update_visibility` = <stored change, intended change> /
    <intended, intended> over all elements: 1 when the step arrived as computed, ~0 when
    rounding swallowed it."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, *, rounding: Rounding = "stochastic", seed: int = 0):
        if rounding not in ROUNDINGS:
            raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))
        self.rounding, self.seed = rounding, int(seed)
        self.last_changed_share = float("nan")
        self.last_update_visibility = float("nan")

    def _init_state(self, p: torch.Tensor, state: dict) -> None:
        low = _is_low(p)
        moment_dtype = torch.float32 if (not low or self.rounding == "master") else p.dtype
        state["step"] = torch.tensor(0.0)
        state["exp_avg"] = torch.zeros_like(p, dtype=moment_dtype, memory_format=torch.contiguous_format)
        state["exp_avg_sq"] = torch.zeros_like(p, dtype=moment_dtype, memory_format=torch.contiguous_format)
        if low and self.rounding == "master":
            state["master"] = p.detach().to(torch.float32, copy=True).contiguous()
        if low and self.rounding == "kahan":
            state["compensation"] = torch.zeros_like(p, memory_format=torch.contiguous_format)

    def _generator(self, device, step: int, index: int, chunk: int) -> torch.Generator:
        g = torch.Generator(device=device)
        key = ((self.seed * 1_000_003 + step) * 1_000_033 + index) * 65_537 + chunk
        g.manual_seed(key % (1 << 62))
        return g

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        changed, dot, norm, total = None, None, None, 0
        index = -1
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                index += 1
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("LowPrecisionAdamW does not support sparse gradients")
                state = self.state[p]
                if not state:
                    self._init_state(p, state)
                state["step"] += 1
                t = int(state["step"].item())
                c, d, n = self._update(p, state, t, index, lr, b1, b2, eps, wd)
                changed = c if changed is None else changed + c
                dot = d if dot is None else dot + d
                norm = n if norm is None else norm + n
                total += p.numel()
        if total:
            self.last_changed_share = float(changed) / total
            n = float(norm)
            self.last_update_visibility = float(dot) / n if n > 0 else float("nan")
        return loss

    def _update(self, p, state, t, index, lr, b1, b2, eps, wd):
        """One parameter, chunk by chunk. Returns (changed elements, <stored, intended>,
        <intended, intended>) as 0-d tensors on the parameter's device (one sync per step)."""
        low = _is_low(p)
        step_size = lr / (1 - b1 ** t)
        bc2_sqrt = math.sqrt(1 - b2 ** t)
        flat_p = p.data.view(-1) if p.data.is_contiguous() else None
        if flat_p is None:
            raise RuntimeError("LowPrecisionAdamW needs contiguous parameters")
        flat_g = p.grad.reshape(-1)
        m_all, v_all = state["exp_avg"].view(-1), state["exp_avg_sq"].view(-1)
        master = state.get("master")
        comp = state.get("compensation")
        master = master.view(-1) if master is not None else None
        comp = comp.view(-1) if comp is not None else None
        zero = torch.zeros((), dtype=torch.float64, device=p.device)
        changed, dot, norm = zero.clone(), zero.clone(), zero.clone()
        for k, s in enumerate(range(0, flat_p.numel(), CHUNK)):
            sl = slice(s, s + CHUNK)
            gen = self._generator(p.device, t, index, k) if (low and self.rounding != "master") else None
            g = flat_g[sl].float()
            m, v = m_all[sl].float(), v_all[sl].float()  # float32 state: views, updated in place
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / bc2_sqrt).add_(eps)
            if not low:  # float32 parameter: torch's AdamW, in place
                w = flat_p[sl]
                old = w.clone()
                w.mul_(1 - lr * wd).addcdiv_(m, denom, value=-step_size)
                new_stored = intended = w
            else:
                old = master[sl].clone() if master is not None else flat_p[sl].float()
                if comp is not None:
                    old = old + comp[sl].float()
                intended = (old * (1 - lr * wd)).addcdiv_(m, denom, value=-step_size)
                new_stored = self._store(flat_p, master, comp, sl, intended, gen)
                if m_all.dtype != torch.float32:  # bf16 moments: stochastic rounding
                    m_all[sl].copy_(stochastic_round_bf16(m, gen) if self.rounding != "nearest" else m)
                    v_all[sl].copy_(stochastic_round_bf16(v, gen) if self.rounding != "nearest" else v)
            delta = intended - old
            changed += (new_stored != old).sum()
            dot += ((new_stored - old).double() * delta.double()).sum()
            norm += delta.double().square().sum()
        return changed, dot, norm

    def _store(self, flat_p, master, comp, sl, intended, gen):
        """Write the float32 `intended` value into the low-precision storage; return the value
        the storage now represents (float32)."""
        if self.rounding == "master":
            master[sl].copy_(intended)
            flat_p[sl].copy_(intended)  # nearest rounding of the exact trajectory
            return intended
        if self.rounding == "kahan":
            w = intended.to(flat_p.dtype)
            rest = (intended - w.float()).to(comp.dtype)
            flat_p[sl].copy_(w)
            comp[sl].copy_(rest)
            return w.float() + rest.float()
        if self.rounding == "stochastic" and flat_p.dtype == torch.bfloat16:
            w = stochastic_round_bf16(intended, gen)
        else:  # nearest (torch's behaviour), or a float16 parameter
            w = intended.to(flat_p.dtype)
        flat_p[sl].copy_(w)
        return w.float()

    def load_state_dict(self, state_dict: dict) -> None:
        """torch casts floating state to the parameter's dtype on load; the float32 master copy
        and float32 moments of a bf16 parameter must keep theirs."""
        super().load_state_dict(state_dict)
        saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for i, p in zip(saved_ids, params):
            saved = state_dict["state"].get(i)
            if not saved:
                continue
            for key, value in saved.items():
                if key != "step" and torch.is_tensor(value):
                    self.state[p][key] = value.to(device=p.device, copy=True)


def make_adamw(params: Iterable, *, lr: float, betas=(0.9, 0.999), weight_decay: float = 0.0,
               rounding: Rounding = "stochastic", seed: int = 0) -> torch.optim.Optimizer:
    """torch's AdamW when every parameter is float32 (exact, and fused kernels on CUDA);
    LowPrecisionAdamW with `rounding` as soon as one is bf16/fp16, so a low-precision model never
    meets an optimizer whose updates round away."""
    params = list(params)
    if all(not _is_low(p) for p in params):
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay)
    return LowPrecisionAdamW(params, lr=lr, betas=betas, weight_decay=weight_decay,
                             rounding=rounding, seed=seed)


class ChangeProbe:
    """The share of parameter elements a step changed, from a fixed sample of each tensor (all
    of a tensor up to `per_tensor` elements, else an evenly strided sample), weighted by tensor
    size: a few hundred KB of copies even for a 7B model. For optimizers that count exactly
    (LowPrecisionAdamW) the learner uses their count instead."""

    def __init__(self, params: Iterable[torch.Tensor], per_tensor: int = 4096):
        self.params = [p for p in params]
        self.index = []
        for p in self.params:
            n = p.numel()
            if n <= per_tensor:
                self.index.append(None)
            else:
                stride = n // per_tensor
                self.index.append(torch.arange(0, stride * per_tensor, stride, device=p.device))
        self._before: list[torch.Tensor] | None = None

    def _sample(self, k: int):
        flat = self.params[k].detach().reshape(-1)
        idx = self.index[k]
        if idx is None:
            return flat.clone()
        if idx.device != flat.device:  # the model moved (accelerate.prepare) after we were made
            idx = self.index[k] = idx.to(flat.device)
        return flat[idx].clone()

    def snapshot(self) -> None:
        self._before = [self._sample(k) for k in range(len(self.params))]

    def changed_share(self) -> float:
        if self._before is None:
            raise RuntimeError("snapshot() before changed_share()")
        num, den = 0.0, 0
        for k, (p, b) in enumerate(zip(self.params, self._before)):
            num += float((self._sample(k) != b).float().mean()) * p.numel()
            den += p.numel()
        self._before = None
        return num / den if den else float("nan")
