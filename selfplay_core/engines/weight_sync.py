"""Weight transports: how the learner's new weights reach the vLLM server(s) after every update.

One class per transport, one interface (`WeightTransport.push(model, tokenizer, servers)`); the
engine (`engines/vllm.py`) picks one, pushes to every data-parallel server, then resets each
server's prefix cache (cached prefixes were computed with the old weights).

| transport    | what happens per update                              | server needs (`serve_flags`)         |
|--------------|------------------------------------------------------|--------------------------------------|
| `filesystem` | save a HF checkpoint into the folder the servers were | dev mode; the model is a local folder|
|              | started on, `POST /collective_rpc {"method":          | the learner can write (shared by all |
|              | "reload_weights"}` on each                            | data-parallel servers)               |
| `lora`       | save the peft adapter to a new version folder, `POST  | `--enable-lora --max-lora-rank R`,   |
|              | /v1/load_lora_adapter {..., "load_inplace": true}`;   | `VLLM_ALLOW_RUNTIME_LORA_UPDATING=   |
|              | generation then asks for the adapter by name          | True`                                |
| `ipc`        | CUDA IPC handles of the learner's own GPU tensors (no | vLLM >= 0.31 on the learner's GPU    |
|              | copy), pickled over HTTP: `/init_weight_transfer_     | (colocated), `--weight-transfer-     |
|              | engine` once, then `/start_weight_update`,            | config '{"backend": "ipc"}'`,        |
|              | `/update_weights`, `/finish_weight_update`            | `VLLM_ALLOW_INSECURE_SERIALIZATION=1`|
| `nccl`       | TRL's `VLLMClient`: an NCCL group per server, every   | `--weight-transfer-config            |
|              | tensor broadcast inside `weight_update()`             | '{"backend": "nccl"}'`; the learner  |
|              |                                                      | process needs trl + vllm + CUDA      |
| `none`       | frozen model (evaluation); `push` refuses             | nothing                              |

The IPC wire format is vLLM 0.31/0.32's `IPCWeightTransferUpdateInfo`: `names`, `dtype_names`
("bfloat16", not "torch.bfloat16"), `shapes`, and `ipc_handles_pickled` = base64(pickle(a list,
one dict per tensor, {physical GPU UUID: the argument tuple of torch's `rebuild_cuda_tensor`}));
the worker rebuilds each tensor on its own device index and loads it through the model's
`load_weights` (checkpoint names, as `named_parameters` gives them). The learner's tensors must
stay alive until `/finish_weight_update` has returned.

A peft model's adapted weights are merged out of place (engines.lora: W + s B A in float32, rounded
once; the frozen base is never written), under the base checkpoint's names; streaming transports
(NCCL, the HF engine) hold one merged tensor at a time, IPC all of them for the transfer.

Tied embeddings (Qwen2.5 0.5B-3B, the toy model): vLLM's in-place reload (layerwise, 0.31/0.32,
used by reload_weights and the weight-transfer routes) gives the embedding a new parameter and
leaves the tied lm_head on the old one, so after a sync the server samples from the new
embeddings and the old output layer (measured on the CPU build: logprobs off by up to 4 nats).
Served folders are therefore written untied (`tie_word_embeddings: false`, an explicit
`lm_head.weight` equal to the embedding) and the transports send `lm_head.weight` too; a
server started on a tied folder is refused (`served_folder_problem`).
"""

from __future__ import annotations

import base64
import os
import pickle
import shutil
import threading
import uuid
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Iterator, Sequence

from selfplay_core.engines._http import JSONClient
from selfplay_core.engines.errors import (EngineError, EngineTimeout, ServerHTTPError,
                                          WeightSyncError)
from selfplay_core.engines.vllm_info import fetch_server_info, version_at_least


def is_peft(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


# ---- talking to a server's development endpoints ---------------------------------------------------
def dev_request(server: JSONClient, method: str, path: str, body=None, *, timeout_s: float, **kw):
    """A request to a route vLLM serves only with VLLM_SERVER_DEV_MODE=1 (or only with some
    flag): a 404 becomes one WeightSyncError saying how to start the server."""
    try:
        return server.request(method, path, body, timeout_s=timeout_s, **kw)
    except ServerHTTPError as e:
        if e.status == 404:
            raise WeightSyncError(f"{server.base_url} has no {path} endpoint: start vLLM with "
                                  "VLLM_SERVER_DEV_MODE=1 (selfplay vllm-serve does) and the flags "
                                  "of the weight sync path") from None
        raise


def on_each(servers: Sequence[JSONClient], fn) -> list:
    """fn(server) on every server at once (data-parallel servers reload in parallel); the first
    error is raised after all have finished."""
    if len(servers) == 1:
        return [fn(servers[0])]
    with ThreadPoolExecutor(max_workers=len(servers)) as pool:
        futures = [pool.submit(fn, s) for s in servers]
        return [f.result() for f in futures]


def run_bounded(fn, timeout_s: float, what: str):
    """Run `fn` in a helper thread and give up waiting after `timeout_s`. Used around TRL's
    client, whose HTTP calls and NCCL collectives have no deadline of their own. A stuck
    collective cannot be cancelled: the caller gets an error and should restart the server and
    the learner."""
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


# ---- the tensors a server loads ---------------------------------------------------------------------
def _check_unsharded(name, p) -> None:
    if hasattr(p, "ds_id") or type(p).__name__ == "DTensor" or \
            type(getattr(p, "data", None)).__name__ == "DTensor":
        raise WeightSyncError(f"parameter {name} is sharded (ZeRO-3/FSDP); gather the full "
                              "weights on rank 0 before sync_weights")


def _named_tensors(model) -> Iterator[tuple[str, Any]]:
    """The tensors under checkpoint names, one at a time, plus the output embedding of a tied
    model under its own name (see the module docstring). A peft model's adapted weights are
    merged out of place as they are asked for (engines.lora.merged_tensors: the frozen base is only
    read, and a streaming consumer holds one merged tensor at a time)."""
    base = model.get_base_model() if is_peft(model) else model
    for name, p in base.named_parameters():
        _check_unsharded(name, p)
    if is_peft(model):
        from selfplay_core.engines.lora import merged_tensors as lora_merged

        yield from lora_merged(model)
    else:
        for name, p in model.named_parameters():
            yield name, p.data
    tied = tied_output_name(base)
    if tied is not None:
        yield tied, base.get_output_embeddings().weight.data


def sync_tensor_specs(model) -> list[tuple[str, Any, list[int]]]:
    """(name, dtype, shape) of every tensor `_named_tensors` yields, in order, computing
    nothing (what a streaming transport announces before it sends)."""
    base = model.get_base_model() if is_peft(model) else model
    if is_peft(model):
        from selfplay_core.engines.lora import merged_tensor_specs

        specs = [(n, d, list(s)) for n, d, s in merged_tensor_specs(model)]
    else:
        specs = [(n, p.dtype, list(p.shape)) for n, p in model.named_parameters()]
    tied = tied_output_name(base)
    if tied is not None:
        w = base.get_output_embeddings().weight
        specs.append((tied, w.dtype, list(w.shape)))
    return specs


def tied_output_name(model) -> str | None:
    """The checkpoint name of the output embedding when it is tied to the input one."""
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    inp = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if out is None or inp is None or out.weight is not inp.weight:
        return None
    return next((f"{n}.weight" for n, m in model.named_modules() if m is out), None)


@contextmanager
def merged_tensors(model):
    """All sync tensors at once, as a list valid until the block ends (a consumer that needs
    them together: IPC handles, a dict). For a peft model the adapted weights are merged copies
    (one per adapted projection); the frozen base is never written."""
    yield list(_named_tensors(model))


def iter_sync_tensors(model) -> Iterator[tuple[str, Any]]:
    """(name, tensor) pairs under the names vLLM loads from a HF checkpoint, made one at a time
    (a streaming consumer holds one merged LoRA tensor at a time). Sharded parameters
    (DeepSpeed ZeRO-3, FSDP DTensors) are refused: they must be gathered on one rank first."""
    yield from _named_tensors(model)


_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".safetensors.index.json", ".bin.index.json")


def write_checkpoint(model, target: Path, tokenizer=None) -> None:
    """Save `model` (merged if peft) as a HF folder into `target`, replacing the weight files the
    server reads. Files are written to a sibling staging folder and moved in one by one with
    os.replace, so a reader never sees a half-written file; stale shards are removed."""
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.staging-{uuid.uuid4().hex[:8]}"
    try:
        if is_peft(model):
            state = {n: t.detach().to("cpu", copy=True) for n, t in iter_sync_tensors(model)}
            model.get_base_model().save_pretrained(str(staging), state_dict=state,
                                                   safe_serialization=True)
        else:
            for name, p in model.named_parameters():  # refuse sharded weights early
                _check_unsharded(name, p)
            model.save_pretrained(str(staging), safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(staging))
        _untie(staging, model.get_base_model() if is_peft(model) else model)
        new = {f.name for f in staging.iterdir()}
        for f in staging.iterdir():
            os.replace(f, target / f.name)
        for f in target.iterdir():
            if f.is_file() and f.name not in new and f.name.endswith(_WEIGHT_SUFFIXES):
                f.unlink()
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _untie(folder: Path, model) -> None:
    """Rewrite a saved tied checkpoint as untied: config `tie_word_embeddings: false` and the
    output embedding stored under its own name (same values), so that vLLM keeps two parameters
    and reloads both."""
    import json

    name = tied_output_name(model)
    cfg_path = folder / "config.json"
    if name is None or not cfg_path.is_file():
        return
    from safetensors.torch import load_file, save_file

    files = sorted(folder.glob("*.safetensors"))
    if len(files) != 1:
        raise WeightSyncError(f"{folder}: untying a tied model saved in {len(files)} shards is not "
                              "supported (tied models are small: save them in one file)")
    tensors = load_file(str(files[0]))
    if name not in tensors:
        tensors[name] = model.get_output_embeddings().weight.detach().to("cpu").clone().contiguous()
        save_file(tensors, str(files[0]), metadata={"format": "pt"})
    cfg = json.loads(cfg_path.read_text())
    cfg["tie_word_embeddings"] = False
    for sub in ("text_config",):  # multimodal configs keep the flag there too
        if isinstance(cfg.get(sub), dict) and "tie_word_embeddings" in cfg[sub]:
            cfg[sub]["tie_word_embeddings"] = False
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def served_folder_problem(folder: str | Path) -> str | None:
    """Why a folder cannot be served for in-place weight updates (None: it can)."""
    import json

    cfg_path = Path(folder) / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError):
        return None  # not ours to judge (a hub id, or written later)
    if cfg.get("tie_word_embeddings"):
        return (f"{folder} ties its input and output embeddings; vLLM's in-place weight reload "
                "would update the embeddings but keep the old output layer. Serve an untied copy "
                "(`selfplay vllm-serve MODEL --served-copy DIR` writes one and serves it)")
    return None


def write_served_copy(model_dir: str | Path, target: str | Path) -> Path:
    """A copy of the HF folder `model_dir` for a server to start on (and filesystem sync to
    rewrite): tokenizer and other files as they are, weights and config rewritten untied."""
    from transformers import AutoModelForCausalLM

    src, target = Path(model_dir), Path(target)
    target.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(_WEIGHT_SUFFIXES):
            shutil.copy2(f, target / f.name)
    write_checkpoint(AutoModelForCausalLM.from_pretrained(str(src), dtype="auto"), target)
    return target


# ---- the transports --------------------------------------------------------------------------------
class WeightTransport(ABC):
    """Hands the learner's weights to every server. `settings` is the engine's config (the
    fields each transport reads are named in its class)."""

    name: ClassVar[str]
    served_name: str | None = None   # set when generation must ask for another model name (lora)

    def __init__(self, settings):
        self.settings = settings

    @abstractmethod
    def push(self, model, tokenizer, servers: Sequence[JSONClient]) -> dict[str, float | str]:
        """Transfer; returns extra metrics (bytes, path)."""

    @staticmethod
    def serve_flags(opts) -> tuple[list[str], dict[str, str]]:
        """`vllm serve` arguments and environment the server needs for this transport."""
        return [], {}

    def close(self) -> None:
        pass


class NoSync(WeightTransport):
    name = "none"

    def push(self, model, tokenizer, servers):
        raise WeightSyncError("weight_sync='none': this engine serves a frozen model")


class FilesystemSync(WeightTransport):
    """Reads `served_model_dir`, `sync_timeout_s`."""

    name = "filesystem"

    def push(self, model, tokenizer, servers):
        s = self.settings
        if not s.served_model_dir:
            raise WeightSyncError("weight_sync='filesystem' needs served_model_dir: the local "
                                  "folder the vLLM server was started on")
        target = Path(s.served_model_dir)
        write_checkpoint(model, target, tokenizer=tokenizer)
        on_each(servers, lambda srv: dev_request(srv, "POST", "/collective_rpc",
                                                 {"method": "reload_weights"},
                                                 timeout_s=s.sync_timeout_s, expect_json=False))
        size = sum(f.stat().st_size for f in target.iterdir() if f.is_file())
        return {"bytes": float(size), "path": str(target)}


class LoraSync(WeightTransport):
    """Reads `lora_dir`, `lora_name`, `keep_lora_versions`, `sync_timeout_s`."""

    name = "lora"

    @staticmethod
    def serve_flags(opts):
        return (["--enable-lora", "--max-lora-rank", str(opts.max_lora_rank)],
                {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"})

    def __init__(self, settings):
        super().__init__(settings)
        self.version = 0

    def push(self, model, tokenizer, servers):
        s = self.settings
        if not is_peft(model):
            raise WeightSyncError("weight_sync='lora' needs a peft model (learner LoRA enabled)")
        if not s.lora_dir:
            raise WeightSyncError("weight_sync='lora' needs lora_dir (a folder the server can read)")
        root = Path(s.lora_dir)
        root.mkdir(parents=True, exist_ok=True)
        # A new folder per version: the server may still be reading the previous one.
        self.version += 1
        path = root / f"v{self.version:06d}"
        staging = root / f".{path.name}.staging-{uuid.uuid4().hex[:8]}"
        model.save_pretrained(str(staging))
        if path.exists():
            shutil.rmtree(path)
        os.replace(staging, path)
        body = {"lora_name": s.lora_name, "lora_path": str(path.resolve()), "load_inplace": True}
        on_each(servers, lambda srv: dev_request(srv, "POST", "/v1/load_lora_adapter", body,
                                                 timeout_s=s.sync_timeout_s, expect_json=False))
        self.served_name = s.lora_name
        versions = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("v"))
        for old in versions[:-s.keep_lora_versions]:
            shutil.rmtree(old, ignore_errors=True)
        return {"path": str(path)}


def cuda_ipc_handle(tensor) -> tuple[str, tuple]:
    """(physical GPU UUID, the argument tuple of `rebuild_cuda_tensor`) for a CUDA tensor: what
    vLLM's IPC worker rebuilds (it replaces the device index, argument 6, by its own)."""
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    props = torch.cuda.get_device_properties(tensor.device.index or 0)
    _, args = reduce_tensor(tensor)
    return str(props.uuid), args


class CudaIpcSync(WeightTransport):
    """vLLM's `ipc` weight-transfer backend (vLLM >= 0.31) for a server on the learner's GPU.
    Reads `sync_timeout_s`, `health_timeout_s`. `handle_of` makes one tensor's handle (tests on
    machines without CUDA pass their own)."""

    name = "ipc"
    MIN_VLLM = "0.31"

    @staticmethod
    def serve_flags(opts):
        import json

        return (["--weight-transfer-config", json.dumps({"backend": "ipc"})],
                {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"})

    def __init__(self, settings, handle_of=None):
        super().__init__(settings)
        self.handle_of = handle_of or cuda_ipc_handle
        self._ready: set[str] = set()

    def _prepare(self, server: JSONClient) -> None:
        """Once per server: check its flags (one clear error instead of a failed transfer), then
        the init handshake (no rendezvous for IPC; `packed: false` = one handle per tensor)."""
        if server.base_url in self._ready:
            return
        s = self.settings
        info = fetch_server_info(server, s.health_timeout_s)
        if version_at_least(info, self.MIN_VLLM) is False:
            raise WeightSyncError(f"{server.base_url} runs vLLM {info.version}; the ipc weight "
                                  f"transfer needs vLLM >= {self.MIN_VLLM} (or use filesystem/nccl)")
        if info.dev_mode and info.weight_transfer_backend not in (None, "ipc"):
            raise WeightSyncError(f"{server.base_url} has weight-transfer backend "
                                  f"{info.weight_transfer_backend!r}; ipc needs the server started "
                                  """with --weight-transfer-config '{"backend": "ipc"}'""")
        if info.dev_mode and info.weight_transfer_backend is None and info.version is not None:
            raise WeightSyncError(f"{server.base_url} has no weight-transfer engine: start it with "
                                  """--weight-transfer-config '{"backend": "ipc"}' and """
                                  "VLLM_ALLOW_INSECURE_SERIALIZATION=1 (selfplay vllm-serve "
                                  "--weight-sync ipc does)")
        if info.insecure_serialization is False:
            raise WeightSyncError(f"{server.base_url} refuses pickled IPC handles: start it with "
                                  "VLLM_ALLOW_INSECURE_SERIALIZATION=1 (selfplay vllm-serve "
                                  "--weight-sync ipc does)")
        dev_request(server, "POST", "/init_weight_transfer_engine",
                    {"init_info": {"packed": False}}, timeout_s=s.sync_timeout_s)
        self._ready.add(server.base_url)

    def payload(self, pairs) -> tuple[dict, list]:
        """The /update_weights body for (name, tensor) pairs, and the tensors to keep alive."""
        keep, names, dtypes, shapes, handles = [], [], [], [], []
        for name, t in pairs:
            w = t.detach().contiguous()  # the same storage when contiguous: no copy
            keep.append(w)
            gpu, args = self.handle_of(w)
            names.append(name)
            dtypes.append(str(w.dtype).removeprefix("torch."))
            shapes.append(list(w.shape))
            handles.append({gpu: args})
        pickled = base64.b64encode(pickle.dumps(handles)).decode("ascii")
        return {"update_info": {"names": names, "dtype_names": dtypes, "shapes": shapes,
                                "ipc_handles_pickled": pickled}}, keep

    def push(self, model, tokenizer, servers):
        s = self.settings
        for srv in servers:
            self._prepare(srv)
        with merged_tensors(model) as pairs:
            cuda = [n for n, t in pairs if getattr(t, "is_cuda", False)]
            if self.handle_of is cuda_ipc_handle:
                if len(cuda) != len(pairs):
                    raise WeightSyncError("weight_sync='ipc' shares the learner's GPU tensors with a "
                                          "server on the same GPU; the learner's weights are not "
                                          "on CUDA (use filesystem on CPU)")
                import torch

                torch.cuda.synchronize()  # the optimizer step has written every tensor
            body, keep = self.payload(pairs)

            def send(srv):
                t = s.sync_timeout_s
                dev_request(srv, "POST", "/start_weight_update", {}, timeout_s=t)
                dev_request(srv, "POST", "/update_weights", body, timeout_s=t)
                dev_request(srv, "POST", "/finish_weight_update", {}, timeout_s=t)

            on_each(servers, send)
            n_bytes = sum(w.numel() * w.element_size() for w in keep)
            del keep  # the servers have copied the weights into their own parameters
        if self.handle_of is cuda_ipc_handle:
            import torch

            torch.cuda.ipc_collect()
        return {"bytes": float(n_bytes)}


class NcclSync(WeightTransport):
    """TRL's `VLLMClient` (needs trl + vllm in this process, CUDA): one NCCL group per server
    (group ports `nccl_group_port + i`). Reads `nccl_group_port`, `nccl_device`,
    `health_timeout_s`, `sync_timeout_s`."""

    name = "nccl"

    @staticmethod
    def serve_flags(opts):
        import json

        return ["--weight-transfer-config", json.dumps({"backend": "nccl"})], {}

    def __init__(self, settings, client_factory=None):
        super().__init__(settings)
        self._factory = client_factory
        self._clients: dict[str, Any] = {}

    def _set_device(self) -> None:
        """The broadcast runs on the current CUDA device of the calling thread, and a new thread
        starts on device 0: set it in every thread that touches the group."""
        import torch

        torch.cuda.set_device(self.settings.nccl_device)

    def _client(self, server: JSONClient, index: int):
        if server.base_url in self._clients:
            return self._clients[server.base_url]
        factory = self._factory
        if factory is None:
            try:
                from trl.generation.vllm_client import VLLMClient as factory
            except ImportError as e:
                raise WeightSyncError("weight_sync='nccl' needs trl and vllm importable in the "
                                      f"learner process ({e}); from the Prefect environment use "
                                      "weight_sync='filesystem' (or 'ipc' on one GPU)") from None
        s = self.settings
        client = run_bounded(lambda: factory(base_url=server.base_url,
                                             group_port=s.nccl_group_port + index,
                                             connection_timeout=s.health_timeout_s),
                             s.health_timeout_s * 3, "connecting TRL's VLLMClient")

        def init():
            self._set_device()
            client.init_communicator(device=s.nccl_device)

        run_bounded(init, s.sync_timeout_s, "initialising the NCCL weight-transfer group")
        self._clients[server.base_url] = client
        return client

    def push(self, model, tokenizer, servers):
        clients = [self._client(srv, i) for i, srv in enumerate(servers)]
        meta = [(n, str(d).removeprefix("torch."), s) for n, d, s in sync_tensor_specs(model)]

        def push_all():
            self._set_device()  # this thread, not only the one that opened the group
            sent = 0
            for client in clients:
                def stream():  # merged LoRA tensors are made one at a time as the client sends
                    nonlocal sent
                    for name, t in iter_sync_tensors(model):
                        sent += t.numel() * t.element_size()
                        yield name, t
                with client.weight_update():
                    client.update_named_params(meta, stream())
            return sent / max(1, len(clients))

        n_bytes = run_bounded(push_all, self.settings.sync_timeout_s, "NCCL weight update")
        return {"bytes": float(n_bytes)}

    def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            try:
                run_bounded(client.close_communicator, self.settings.health_timeout_s,
                            "closing the NCCL group")
            except EngineError:
                pass  # closing is best effort; the server drops the group when we exit


def choose_transport(want: str, *, placement: str = "server", peft: bool = False,
                     cuda: bool = False, trl_vllm: bool = False) -> tuple[str, str]:
    """The transport a run uses and why (what `--dry-run` and the plan print). `want` is
    gpu.weight_sync; `auto` takes, in order: ipc for a server colocated on the learner's GPU,
    nccl where TRL's client can run (trl + vllm import here, CUDA), lora for a LoRA learner,
    else filesystem."""
    if want != "auto":
        return want, "set by gpu.weight_sync"
    if placement == "colocated" and cuda:
        return "ipc", ("the server shares the learner's GPU: CUDA IPC handles of the learner's "
                       "own tensors, no copy (vLLM >= 0.31)")
    if trl_vllm and cuda:
        return "nccl", "trl and vllm import in the learner and CUDA is up: NCCL broadcast"
    if peft:
        return "lora", "a LoRA learner: the adapter is saved and loaded in place"
    why = ("trl + vllm do not import in the learner (the Prefect venv)" if cuda else "no CUDA")
    return "filesystem", f"{why}: a checkpoint into the served folder, then reload_weights"


TRANSPORTS: dict[str, type[WeightTransport]] = {
    cls.name: cls for cls in (NoSync, FilesystemSync, LoraSync, CudaIpcSync, NcclSync)}


def make_transport(mode: str, settings) -> WeightTransport:
    try:
        return TRANSPORTS[mode](settings)
    except KeyError:
        raise WeightSyncError(f"unknown weight_sync mode {mode!r}; choose one of "
                              f"{sorted(TRANSPORTS)}") from None
