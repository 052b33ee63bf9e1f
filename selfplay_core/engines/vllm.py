"""`VLLMEngine`: generation from a vLLM server running in its own process and environment.

vLLM cannot share a Python environment with Prefect (fastapi pins, its own torch; see
ENVIRONMENT.md), so the pipeline never imports it: the server runs from its own venv
(`selfplay vllm-serve`, or `trl vllm-serve`, which in TRL 1.16 only executes `vllm serve` with the
flags below) and this engine talks HTTP to it.

Generation uses vLLM's OpenAI-compatible `POST /v1/completions` with `n`, `temperature`,
`top_p`, `max_tokens`, `stop`, `seed`, `logprobs: 0` (the sampled token's logprob only) and vLLM's
extensions `return_token_ids` / `return_tokens_as_token_ids`, so each choice carries its prompt and
completion token ids and the per-token logprobs the learner needs as "old logprobs".

Logprob semantics: `learner.token_logprobs` scores tokens with the raw (untempered) logits, so the
server should return raw logprobs too (`--logprobs-mode raw_logprobs`, vLLM's default and what
`selfplay vllm-serve` sets). TRL launches with `processed_logprobs` because its trainer divides
logits by the temperature; mixing the two conventions biases the importance ratio when
temperature != 1.

Weight sync after each update (`sync_weights(model)`), by server:

| mode         | what happens                                         | server needs                         |
|--------------|------------------------------------------------------|--------------------------------------|
| `nccl`       | TRL's `VLLMClient`: init the NCCL group once, stream  | `VLLM_SERVER_DEV_MODE=1`,             |
|              | every tensor (`update_named_params` inside            | `--weight-transfer-config            |
|              | `weight_update()`), reset the prefix cache            | '{"backend": "nccl"}'`; the learner  |
|              |                                                      | process needs `trl` + `vllm` + CUDA  |
| `filesystem` | save a HF checkpoint into the folder the server was   | `VLLM_SERVER_DEV_MODE=1`, the server |
|              | started on, `POST /collective_rpc                     | started on a local folder the learner|
|              | {"method": "reload_weights"}`, reset the prefix cache | can write (shared filesystem)        |
| `lora`       | save the peft adapter to a new folder, `POST          | `--enable-lora --max-lora-rank R`,   |
|              | /v1/load_lora_adapter {..., "load_inplace": true}`;   | `VLLM_ALLOW_RUNTIME_LORA_UPDATING=   |
|              | generation then asks for the adapter by name          | True`                                |
| `none`       | frozen model (evaluation); `sync_weights` refuses     | nothing                              |

`auto` picks `nccl` when `trl` and `vllm` import in this process and CUDA is up, else
`filesystem` when `served_model_dir` is set, else `lora` for a peft model. The NCCL path cannot run
from the Prefect environment (TRL's client imports vLLM's NCCL helpers), so there the filesystem
path is the default; it costs a checkpoint write per update (~15 GB for a 7B model in bf16).

Every request has a deadline; every failure raises one `EngineError` subclass with a one-line
message (unreachable, HTTP error with the server's message, malformed answer, timeout). Call
`check_health()` (or `wait_until_healthy()`) before a run starts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field

from selfplay_core.engines._http import JSONClient
from selfplay_core.engines.base import Completion, SamplingParams
from selfplay_core.engines.errors import (EngineError, EngineTimeout, MalformedResponse,
                                          ServerHTTPError, ServerUnreachable, WeightSyncError)

WeightSync = Literal["auto", "nccl", "filesystem", "lora", "none"]


class VLLMEngineConfig(BaseModel):
    """How to reach the server and push weights to it. Frozen; unknown keys are an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(description="root of the server, e.g. http://127.0.0.1:8000 (no /v1)")
    model: str | None = Field(None, description="served model name; default: the server's first")
    weight_sync: WeightSync = "auto"
    served_model_dir: str | None = Field(
        None, description="filesystem sync: the local folder the server was started on")
    lora_dir: str | None = Field(None, description="lora sync: where adapter versions are written")
    lora_name: str = "policy"
    keep_lora_versions: int = Field(2, ge=1)
    request_timeout_s: float = Field(600.0, gt=0, description="one generation request")
    health_timeout_s: float = Field(10.0, gt=0, description="one health/metadata request")
    sync_timeout_s: float = Field(900.0, gt=0, description="one weight sync (write + reload)")
    max_prompts_per_request: int = Field(64, ge=1)
    max_concurrent_requests: int = Field(4, ge=1)
    nccl_group_port: int = Field(51216, ge=1, le=65535)
    nccl_device: int = Field(0, ge=0)


def _is_peft(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def _module_available(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def iter_sync_tensors(model) -> Iterator[tuple[str, Any]]:
    """(name, tensor) pairs under the names vLLM loads from a HF checkpoint.

    A peft model yields each adapted weight merged out of place, one fresh tensor at a time
    (engines.lora.merged_tensors: the frozen base is never written), adapter tensors skipped and
    `base_layer.` / `modules_to_save.default.` dropped from the names.
    Sharded parameters (DeepSpeed ZeRO-3, FSDP DTensors) are refused: they must be gathered on
    one rank first, which this module does not do.
    """
    def check(name, p):
        if hasattr(p, "ds_id") or type(p).__name__ == "DTensor" or \
                type(getattr(p, "data", None)).__name__ == "DTensor":
            raise WeightSyncError(f"parameter {name} is sharded (ZeRO-3/FSDP); gather the full "
                                  "weights on rank 0 before sync_weights")

    if not _is_peft(model):
        for name, p in model.named_parameters():
            check(name, p)
            yield name, p.data
        return
    from selfplay_core.engines.lora import merged_tensors

    for name, p in model.get_base_model().named_parameters():
        check(name, p)
    yield from merged_tensors(model)


def _run_bounded(fn, timeout_s: float, what: str):
    """Run `fn` in a helper thread and give up waiting after `timeout_s`. Used around TRL's client,
    whose HTTP calls and NCCL collectives have no deadline of their own. A stuck collective cannot
    be cancelled: the caller gets an error and should restart the server and the learner."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, name=f"vllm-sync:{what}", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise EngineTimeout(f"{what} did not finish within {timeout_s:g} s (a stuck NCCL "
                            "transfer cannot be cancelled: restart the vLLM server and the learner)")
    if "error" in box:
        e = box["error"]
        if isinstance(e, EngineError):
            raise e
        raise WeightSyncError(f"{what} failed: {type(e).__name__}: {e}") from e
    return box.get("value")


class VLLMEngine:
    """The `Engine` interface against a vLLM server (see the module docstring)."""

    def __init__(self, config: VLLMEngineConfig):
        self.config = config
        self.http = JSONClient(config.base_url, name="vLLM server")
        self.served_model: str | None = config.model
        self.weight_version = 0
        self._mode: str | None = None if config.weight_sync == "auto" else config.weight_sync
        self._lora_loaded = False
        self._trl_client = None

    # ---- health -------------------------------------------------------------------------------
    def check_health(self) -> dict:
        """One round of checks before a run: /health answers 200, /v1/models serves the model.
        Returns {"url", "model", "models"}; raises an EngineError otherwise."""
        t = self.config.health_timeout_s
        self.http.request("GET", "/health", timeout_s=t, expect_json=False)
        body = self.http.request("GET", "/v1/models", timeout_s=t)
        try:
            ids = [str(m["id"]) for m in body["data"]]
        except (TypeError, KeyError):
            raise MalformedResponse(f"GET {self.http.base_url}/v1/models: expected "
                                    f'{{"data": [{{"id": ...}}]}}, got {str(body)[:200]}') from None
        if not ids:
            raise MalformedResponse(f"{self.http.base_url} serves no model")
        if self.config.model is not None and self.config.model not in ids:
            raise EngineError(f"vLLM server at {self.http.base_url} serves {ids}, not "
                              f"{self.config.model!r}")
        if self.served_model is None:
            self.served_model = ids[0]
        return {"url": self.http.base_url, "model": self.served_model, "models": ids}

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

    def _model_name(self) -> str:
        if self._lora_loaded:
            return self.config.lora_name
        if self.served_model is None:
            self.check_health()
        return self.served_model

    # ---- generation ---------------------------------------------------------------------------
    def _payload(self, prompts: list[str], n: int, s: SamplingParams, seed_offset: int) -> dict:
        body = {
            "model": self._model_name(),
            "prompt": prompts,
            "n": n,
            "max_tokens": s.max_new_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "logprobs": 0,  # the sampled token's logprob only
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if s.stop:
            body["stop"] = list(s.stop)
        if s.seed is not None:
            # Requests of one call must not share a random stream: offset by the chunk start.
            body["seed"] = s.seed + seed_offset
        return body

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        if not prompts:
            return []
        step = self.config.max_prompts_per_request
        starts = list(range(0, len(prompts), step))

        def one(start: int) -> list[list[Completion]]:
            chunk = prompts[start:start + step]
            body = self.http.request("POST", "/v1/completions",
                                     self._payload(chunk, n, sampling, start),
                                     timeout_s=self.config.request_timeout_s)
            return self._parse_completions(body, len(chunk), n)

        if len(starts) == 1:
            return one(0)
        with ThreadPoolExecutor(max_workers=min(self.config.max_concurrent_requests,
                                                len(starts))) as pool:
            parts = list(pool.map(one, starts))
        return [group for part in parts for group in part]

    def _parse_completions(self, body: Any, n_prompts: int, n: int) -> list[list[Completion]]:
        where = f"POST {self.http.base_url}/v1/completions"

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
        elif _is_peft(model) and self.config.lora_dir:
            self._mode = "lora"
        else:
            raise WeightSyncError("weight_sync='auto' found no usable path: NCCL needs trl + vllm "
                                  "in this process and CUDA; set served_model_dir (filesystem) or "
                                  "lora_dir with a peft model (lora)")
        return self._mode

    def sync_weights(self, model, tokenizer=None) -> dict[str, float | str]:
        """Hand the learner's current weights to the server; returns {"mode", "seconds", ...}.
        Call it on one process (rank 0) with the unwrapped model."""
        mode = self._resolve_mode(model)
        t0 = time.monotonic()
        if mode == "none":
            raise WeightSyncError("weight_sync='none': this engine serves a frozen model")
        if mode == "nccl":
            info = self._sync_nccl(model)
        elif mode == "filesystem":
            info = self._sync_filesystem(model, tokenizer)
        elif mode == "lora":
            info = self._sync_lora(model)
        else:  # pragma: no cover - the config type forbids it
            raise WeightSyncError(f"unknown weight_sync mode {mode!r}")
        self.weight_version += 1
        return {"mode": mode, "seconds": time.monotonic() - t0, "version": self.weight_version, **info}

    def reset_prefix_cache(self) -> None:
        """Drop cached prefixes: they were computed with the old weights. vLLM >= 0.26 answers
        {"success": false} when it skipped the reset (requests still hold KV blocks); older
        versions answer an empty body."""
        text = self._dev_request("POST", "/reset_prefix_cache",
                                 timeout_s=self.config.health_timeout_s, expect_json=False)
        try:
            body = json.loads(text) if text and text.strip() else None
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("success") is False:
            raise WeightSyncError(f"{self.http.base_url} did not reset its prefix cache (requests "
                                  "still running?): new weights would reuse old cached prefixes")

    def _dev_request(self, method: str, path: str, body=None, *, timeout_s: float, **kw):
        try:
            return self.http.request(method, path, body, timeout_s=timeout_s, **kw)
        except ServerHTTPError as e:
            if e.status == 404:
                raise WeightSyncError(f"{self.http.base_url} has no {path} endpoint: start vLLM "
                                      "with VLLM_SERVER_DEV_MODE=1 (selfplay vllm-serve does)") from None
            raise

    # filesystem ---------------------------------------------------------------------------------
    def _sync_filesystem(self, model, tokenizer) -> dict:
        if not self.config.served_model_dir:
            raise WeightSyncError("weight_sync='filesystem' needs served_model_dir: the local "
                                  "folder the vLLM server was started on")
        target = Path(self.config.served_model_dir)
        write_checkpoint(model, target, tokenizer=tokenizer)
        self._dev_request("POST", "/collective_rpc", {"method": "reload_weights"},
                          timeout_s=self.config.sync_timeout_s, expect_json=False)
        self.reset_prefix_cache()
        size = sum(f.stat().st_size for f in target.iterdir() if f.is_file())
        return {"bytes": float(size), "path": str(target)}

    # lora ---------------------------------------------------------------------------------------
    def _sync_lora(self, model) -> dict:
        if not _is_peft(model):
            raise WeightSyncError("weight_sync='lora' needs a peft model (learner LoRA enabled)")
        if not self.config.lora_dir:
            raise WeightSyncError("weight_sync='lora' needs lora_dir (a folder the server can read)")
        root = Path(self.config.lora_dir)
        root.mkdir(parents=True, exist_ok=True)
        # A new folder per version: the server may still be reading the previous one.
        path = root / f"v{self.weight_version + 1:06d}"
        staging = root / f".{path.name}.staging-{uuid.uuid4().hex[:8]}"
        model.save_pretrained(str(staging))
        os.replace(staging, path)
        self._dev_request("POST", "/v1/load_lora_adapter",
                          {"lora_name": self.config.lora_name, "lora_path": str(path.resolve()),
                           "load_inplace": True},
                          timeout_s=self.config.sync_timeout_s, expect_json=False)
        self._lora_loaded = True
        versions = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("v"))
        for old in versions[:-self.config.keep_lora_versions]:
            shutil.rmtree(old, ignore_errors=True)
        return {"path": str(path)}

    # nccl ---------------------------------------------------------------------------------------
    def _client(self):
        if self._trl_client is not None:
            return self._trl_client
        try:
            from trl.generation.vllm_client import VLLMClient
        except ImportError as e:
            raise WeightSyncError("weight_sync='nccl' needs trl and vllm importable in the learner "
                                  f"process ({e}); from the Prefect environment use "
                                  "weight_sync='filesystem'") from None
        c = self.config
        client = _run_bounded(lambda: VLLMClient(base_url=c.base_url, group_port=c.nccl_group_port,
                                                 connection_timeout=c.health_timeout_s),
                              c.health_timeout_s * 3, "connecting TRL's VLLMClient")
        _run_bounded(lambda: client.init_communicator(device=c.nccl_device), c.sync_timeout_s,
                     "initialising the NCCL weight-transfer group")
        self._trl_client = client
        return client

    def _sync_nccl(self, model) -> dict:
        client = self._client()
        if _is_peft(model):  # merged tensors are made one at a time as the client sends them
            from selfplay_core.engines.lora import merged_tensor_specs

            specs = [(n, d, list(s)) for n, d, s in merged_tensor_specs(model)]
        else:
            specs = [(n, t.dtype, list(t.shape)) for n, t in iter_sync_tensors(model)]

        def push():
            meta = [(n, str(d).removeprefix("torch."), s) for n, d, s in specs]
            sent = [0]

            def stream():
                for n, t in iter_sync_tensors(model):
                    sent[0] += t.numel() * t.element_size()
                    yield n, t

            with client.weight_update():
                client.update_named_params(meta, stream())
            return sent[0]

        n_bytes = _run_bounded(push, self.config.sync_timeout_s, "NCCL weight update")
        self.reset_prefix_cache()
        return {"bytes": float(n_bytes)}

    # ---- colocated placement: free the GPU for the learner between generations ------------------
    def sleep(self, level: int = 1) -> None:
        """Level 1 offloads weights to CPU and drops the KV cache; level 2 drops both (reload
        with `wake_up` + a weight sync). Needs `--enable-sleep-mode` and dev mode."""
        self._dev_request("POST", "/sleep", params={"level": level},
                          timeout_s=self.config.sync_timeout_s, expect_json=False)

    def wake_up(self, tags: list[str] | None = None) -> None:
        params = {"tags": tags} if tags else None
        self._dev_request("POST", "/wake_up", params=params, timeout_s=self.config.sync_timeout_s,
                          expect_json=False)

    def close(self) -> None:
        if self._trl_client is not None:
            client, self._trl_client = self._trl_client, None
            try:
                _run_bounded(client.close_communicator, self.config.health_timeout_s,
                             "closing the NCCL group")
            except EngineError:
                pass  # closing is best effort; the server drops the group when we exit

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- checkpoint folder for the filesystem path ----------------------------------------------------
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".safetensors.index.json", ".bin.index.json")


def write_checkpoint(model, target: Path, tokenizer=None) -> None:
    """Save `model` (merged if peft) as a HF folder into `target`, replacing the weight files the
    server reads. Files are written to a sibling staging folder and moved in one by one with
    os.replace, so a reader never sees a half-written file; stale shards are removed."""
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.staging-{uuid.uuid4().hex[:8]}"
    try:
        if _is_peft(model):
            state = {n: t.detach().to("cpu", copy=True) for n, t in iter_sync_tensors(model)}
            model.get_base_model().save_pretrained(str(staging), state_dict=state,
                                                   safe_serialization=True)
        else:
            for name, p in model.named_parameters():  # refuse sharded weights early
                if hasattr(p, "ds_id"):
                    raise WeightSyncError(f"parameter {name} is sharded (ZeRO-3); gather the "
                                          "full weights on rank 0 before sync_weights")
            model.save_pretrained(str(staging), safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(staging))
        new = {f.name for f in staging.iterdir()}
        for f in staging.iterdir():
            os.replace(f, target / f.name)
        for f in target.iterdir():
            if f.is_file() and f.name not in new and f.name.endswith(_WEIGHT_SUFFIXES):
                f.unlink()
    finally:
        shutil.rmtree(staging, ignore_errors=True)
