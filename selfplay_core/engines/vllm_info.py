"""What a running vLLM server says about itself: version, device, logprob mode, sleep mode, weight
transfer backend. The engine uses it to pick its seeding (a CPU build cannot take per-request
seeds), to refuse a server whose logprobs are not the learner's convention, and the weight
transports use it to name the missing server flag before a transfer fails halfway.

Sources, from vLLM's own routes (0.22-0.32):
* `GET /version` -> {"version": "0.32.0"} (always served);
* `GET /server_info?config_format=json` (dev mode, `VLLM_SERVER_DEV_MODE=1`) -> {"vllm_config":
  {"model_config": {"logprobs_mode", "enable_sleep_mode", "max_model_len", ...}, "device_config":
  {"device": "cpu"|"cuda"}, "weight_transfer_config": {"backend": ...} | null, ...}, "vllm_env":
  {"VLLM_ALLOW_INSECURE_SERIALIZATION": bool, ...}}. Versions without `config_format` answer the
  text form, where `vllm_config` is one string ("..., device_config=cpu, ..."); from that only the
  device is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from selfplay_core.engines._http import JSONClient
from selfplay_core.engines.errors import MalformedResponse, ServerHTTPError


@dataclass(frozen=True)
class ServerInfo:
    url: str
    version: str | None = None
    device: str | None = None            # "cpu", "cuda", ... (None: not reported)
    logprobs_mode: str | None = None     # "raw_logprobs", "processed_logprobs", ...
    sleep_mode: bool | None = None
    weight_transfer_backend: str | None = None
    insecure_serialization: bool | None = None
    dev_mode: bool = True                # False: /server_info is not served (404)

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu"


def _version_tuple(v: str | None) -> tuple[int, ...]:
    nums = re.findall(r"\d+", v or "")[:3]
    return tuple(int(n) for n in nums)


def version_at_least(info: ServerInfo, minimum: str) -> bool | None:
    """Whether the server's vLLM is at least `minimum` (None: it did not say)."""
    if not info.version:
        return None
    return _version_tuple(info.version) >= _version_tuple(minimum)


def fetch_server_info(client: JSONClient, timeout_s: float) -> ServerInfo:
    version = None
    try:
        body = client.request("GET", "/version", timeout_s=timeout_s)
        if isinstance(body, dict) and body.get("version"):
            version = str(body["version"])
    except ServerHTTPError:
        pass
    try:
        body = client.request("GET", "/server_info", params={"config_format": "json"},
                              timeout_s=timeout_s)
    except ServerHTTPError as e:
        if e.status == 404:
            return ServerInfo(client.base_url, version=version, dev_mode=False)
        raise
    if not isinstance(body, dict):
        raise MalformedResponse(f"GET {client.base_url}/server_info: expected a JSON object, got "
                                f"{str(body)[:200]}")
    cfg, env = body.get("vllm_config"), body.get("vllm_env")
    env = env if isinstance(env, dict) else {}
    insecure = env.get("VLLM_ALLOW_INSECURE_SERIALIZATION")
    insecure = bool(insecure) if insecure is not None else None
    if isinstance(cfg, str):  # the text form of older servers
        m = re.search(r"device_config=([A-Za-z_]+)", cfg)
        return ServerInfo(client.base_url, version=version, device=m.group(1) if m else None,
                          insecure_serialization=insecure)
    cfg = cfg if isinstance(cfg, dict) else {}
    model = cfg.get("model_config") if isinstance(cfg.get("model_config"), dict) else {}
    device = cfg.get("device_config")
    device = device.get("device") if isinstance(device, dict) else device
    transfer = cfg.get("weight_transfer_config")
    backend = transfer.get("backend") if isinstance(transfer, dict) else None
    sleep = model.get("enable_sleep_mode")
    return ServerInfo(client.base_url, version=version,
                      device=str(device) if device is not None else None,
                      logprobs_mode=model.get("logprobs_mode"),
                      sleep_mode=bool(sleep) if sleep is not None else None,
                      weight_transfer_backend=backend, insecure_serialization=insecure)
