"""PROTOCOL TEST DOUBLE — this is not vLLM.

A small HTTP server that implements the subset of vLLM's OpenAI-compatible server (with its
development endpoints) that `VLLMEngine` and `selfplay vllm-serve` use, so that the engine's
request/response handling, timeouts, error paths and weight-sync requests can be tested on a
machine where vLLM cannot run. It generates no language: completions are a deterministic function
of (prompt, sample index, seed), one character per token (token id = ord(char)), and every token's
logprob is derived from its id. Shapes and field names follow vLLM's answers:

  GET  /health                      200, empty body
  GET  /version                     {"version": "0.32.0"}
  GET  /v1/models                   {"data": [{"id": MODEL, ...}]}
  GET  /server_info                 {"vllm_config": "<the config as one string>", "vllm_env",
                                    "system_env"}; with ?config_format=json the config as an object
                                    (model_config.logprobs_mode / enable_sleep_mode, device_config,
                                    weight_transfer_config), as vLLM 0.31/0.32 answer
  POST /v1/completions              choices[i] = {index, text, token_ids, prompt_token_ids,
                                    finish_reason, stop_reason, logprobs: {tokens: ["token_id:N"],
                                    token_logprobs, top_logprobs, text_offset}}
  POST /collective_rpc              {"method": "reload_weights"} -> records what is in the folder
  POST /reset_prefix_cache          {"success": true}
  POST /v1/load_lora_adapter        plain text "Success: ..."
  POST /sleep?level=N               {"status": "sleeping", "level": N}; weights and KV cache asleep
  POST /wake_up?tags=A&tags=B       wakes the named parts (none named: all), as vLLM reads the
                                    tags (query_params.getlist); {"status": "awake"|"sleeping"}
  GET  /is_sleeping                 {"is_sleeping": bool}
  POST /init_weight_transfer_engine, /start_weight_update, /update_weights,
       /finish_weight_update        vLLM's weight-transfer routes; `update_weights` checks an IPC
                                    payload as vLLM's IPCWeightTransferUpdateInfo does and hands
                                    each handle to `FakeVLLM.rebuild` (set by the test)

Sampling: a seeded request is a deterministic function of (prompt, sample index, seed); an
unseeded one draws fresh randomness per sample, as a real server does.

Scripted mode (loop tests): `FakeVLLM(script=fn, tokenizer=tok)` answers each sample with
`fn(prompt, k)` (k = the sample's index) instead of characters, and counts tokens with a real
tokenizer (`tok(text)["input_ids"]`), so a learner in the test process can train on the token ids
and the completions can carry code. Every `reload_weights` is recorded with the folder's files and
the sha256 of its weight files at that moment (`FakeVLLM.reloads`).

Failure modes for tests (`FakeVLLM.mode`): "ok", "hang" (accept, never answer), "error500"
(vLLM-style error body), "malformed" (200 with invalid JSON), "wrong_count" (one choice missing),
"nan_logprob", "no_token_ids", "reset_refused" (/reset_prefix_cache answers success false). Run standalone as `python fake_vllm_server.py serve MODEL --port P`
(the launcher test points a fake venv's `python` at this file).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit


def _sample_chars(prompt: str, k: int, seed, greedy: bool, length: int) -> str:
    if seed is None and not greedy:
        import os
        seed = "unseeded-" + os.urandom(8).hex()
    key = f"{prompt}|{0 if greedy else k}|{seed}".encode()
    digest = b""
    i = 0
    while len(digest) < length:
        digest += hashlib.sha256(key + str(i).encode()).digest()
        i += 1
    return "".join("abcdefghij klmnop\nqrstuvwxyz"[b % 28] for b in digest[:length])


def toy_loop_script(prompt: str, k: int) -> str:
    """Scripted answers for a self-play loop on the toy prompt formats (roles/teacher.py,
    roles/student.py): a teacher prompt gets a valid proposal "Return x plus N." (N from the
    prompt and k, so proposals differ); a student prompt for such a task gets the right body
    for even k and a wrong one for odd k (pass rate 1/2: in the lemma band, reward signal in
    every student group); anything else a wrong body."""
    import re

    if "### Variant:" in prompt:
        n = int(hashlib.sha256(f"{prompt}|{k}".encode()).hexdigest(), 16) % 900 + 2
        return (f"### Task\nReturn x plus {n}.\n### Solution\ndef f(x):\n    return x + {n}\n"
                "### Inputs\n1\n2\n3\n4\n### End\n")
    m = re.search(r"Return x plus (\d+)\.", prompt)
    if m and k % 2 == 0:
        return f"    return x + {m.group(1)}\n<|endoftext|>"
    return "    return 0\n<|endoftext|>"


SCRIPTS = {"toy-loop": toy_loop_script}


def logprob_of(token_id: int) -> float:
    return -((token_id % 7) + 1) / 10.0


class FakeVLLM:
    def __init__(self, model: str = "fake-model", served_dir: str | None = None,
                 port: int = 0, host: str = "127.0.0.1", script=None, tokenizer=None):
        self.model = model
        self.script = script          # (prompt, k) -> completion text; None: characters
        self.tokenizer = tokenizer    # None: one character per token (id = ord)
        self.events_path: str | None = None  # standalone: reloads appended here as JSON lines
        self.served_dir = served_dir
        self.mode = "ok"
        self.requests: list[tuple[str, str, dict | None]] = []
        self.reloads: list[dict] = []
        self.loras: dict[str, str] = {}
        self.asleep: set[str] = set()
        self.dev_mode = True
        self.version = "0.32.0"
        self.device = "cuda"                   # what /server_info reports
        self.logprobs_mode = "processed_logprobs"
        self.weight_transfer: str | None = None  # backend of --weight-transfer-config
        self.insecure_serialization = False
        self.queries: list[dict[str, list[str]]] = []  # each request's query, parsed as vLLM does
        self.rebuild = None                    # IPC: fn(gpu_uuid, args) -> tensor
        self.weight_updates: list[dict] = []   # IPC: what each /update_weights carried
        self._stop = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _send(self, status: int, body, content_type="application/json"):
                raw = body if isinstance(body, bytes) else (
                    json.dumps(body).encode() if content_type == "application/json" else body.encode())
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _handle(self, method: str):
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.requests.append((method, url.path, body))
                fake.queries.append(parse_qs(url.query))
                if fake.mode == "hang":
                    fake._stop.wait(60)
                    return
                if fake.mode == "error500":
                    return self._send(500, {"error": {"message": "CUDA out of memory (fake)",
                                                      "type": "InternalServerError", "code": 500}})
                if fake.mode == "malformed":
                    return self._send(200, b"{not json", "application/json")
                route = fake.route(method, url.path, parse_qs(url.query), body)
                self._send(*route)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # uvicorn's backlog is 2048; Python's default 5 resets bursts

        self.server = Server((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self._thread: threading.Thread | None = None

    # ---- routes -------------------------------------------------------------------------------
    def route(self, method, path, query, body):
        dev_only = {"/server_info", "/collective_rpc", "/reset_prefix_cache", "/sleep", "/wake_up",
                    "/is_sleeping", "/init_weight_transfer_engine", "/start_weight_update",
                    "/update_weights", "/finish_weight_update"}
        if path in dev_only and not self.dev_mode:
            return 404, {"detail": "Not Found"}
        if method == "GET" and path == "/health":
            return 200, b"", "text/plain"
        if method == "GET" and path == "/version":
            return 200, {"version": self.version}
        if method == "GET" and path == "/v1/models":
            data = [{"id": self.model, "object": "model", "root": self.model, "parent": None}]
            data += [{"id": n, "object": "model", "root": p, "parent": self.model}
                     for n, p in self.loras.items()]
            return 200, {"object": "list", "data": data}
        if method == "GET" and path == "/server_info":
            return 200, self.server_info(query.get("config_format", ["text"])[0])
        if method == "POST" and path == "/v1/completions":
            return self.completions(body)
        if method == "POST" and path == "/collective_rpc":
            if body != {"method": "reload_weights"}:
                return 400, {"error": {"message": f"unsupported rpc {body}"}}
            folder = Path(self.served_dir) if self.served_dir else None
            files = sorted(f.name for f in folder.iterdir()) if folder and folder.is_dir() else []
            weights = {f: hashlib.sha256((folder / f).read_bytes()).hexdigest()
                       for f in files if f.endswith(".safetensors")}
            self.reloads.append({"files": files, "weights_sha256": weights, "time": time.time()})
            if self.events_path:
                with open(self.events_path, "a") as f:
                    f.write(json.dumps({"reload": self.reloads[-1]}) + "\n")
            return 200, {"results": [None]}
        if method == "POST" and path == "/reset_prefix_cache":
            return 200, {"success": self.mode != "reset_refused"}
        if method == "POST" and path == "/v1/load_lora_adapter":
            if not Path(body["lora_path"], "adapter_config.json").is_file():
                return 400, {"error": {"message": f"No adapter found for {body['lora_path']}"}}
            self.loras[body["lora_name"]] = body["lora_path"]
            return 200, f"Success: LoRA adapter '{body['lora_name']}' added successfully.", "text/plain"
        if method == "POST" and path == "/sleep":
            level = int(query.get("level", ["1"])[0])
            self.asleep = {"weights", "kv_cache"}
            return 200, {"status": "sleeping", "level": level}
        if method == "POST" and path == "/wake_up":
            tags = query.get("tags") or None   # vLLM: no tags = wake everything
            self.asleep = set() if tags is None else self.asleep - set(tags)
            return 200, {"status": "sleeping" if self.asleep else "awake", "tags": tags}
        if method == "GET" and path == "/is_sleeping":
            return 200, {"is_sleeping": bool(self.asleep)}
        if path in ("/init_weight_transfer_engine", "/start_weight_update", "/update_weights",
                    "/finish_weight_update") and method == "POST":
            return self.weight_transfer_route(path, body)
        return 404, {"detail": "Not Found"}

    @property
    def sleeping(self) -> bool:
        return bool(self.asleep)

    def server_info(self, fmt: str) -> dict:
        env = {"VLLM_SERVER_DEV_MODE": True,
               "VLLM_ALLOW_INSECURE_SERIALIZATION": self.insecure_serialization}
        transfer = {"backend": self.weight_transfer} if self.weight_transfer else None
        if fmt == "json":
            cfg = {"model_config": {"model": self.model, "logprobs_mode": self.logprobs_mode,
                                    "enable_sleep_mode": False, "max_model_len": 512},
                   "device_config": {"device": self.device},
                   "weight_transfer_config": transfer}
        else:
            cfg = (f"model='{self.model}', dtype=torch.float32, max_seq_len=512, "
                   f"device_config={self.device}, seed=0, enable_prefix_caching=True")
        return {"vllm_config": cfg, "vllm_env": env, "system_env": {}}

    def weight_transfer_route(self, path, body):
        """vLLM's routes; errors as vLLM raises them (500 with the message)."""
        if self.weight_transfer is None:
            return 500, {"error": {"message": "Weight transfer not configured. Please set "
                                              "weight_transfer_config to enable weight transfer."}}
        if path == "/init_weight_transfer_engine":
            if not isinstance(body, dict) or "init_info" not in body:
                return 400, {"detail": "Missing 'init_info' in request body"}
            self.transfer_init = body["init_info"]
            return 200, {"message": "Weight transfer initialized"}
        if path == "/start_weight_update":
            self.updating = True
            return 200, {"message": "Weight update started"}
        if path == "/finish_weight_update":
            self.updating = False
            return 200, {"message": "Weight update finished"}
        info = (body or {}).get("update_info")
        if info is None:
            return 400, {"detail": "Missing 'update_info' in request body"}
        if self.weight_transfer == "ipc":
            import base64
            import pickle

            if not self.insecure_serialization:
                return 500, {"error": {"message": "Refusing to deserialize `ipc_handles_pickled` "
                                                  "without VLLM_ALLOW_INSECURE_SERIALIZATION=1"}}
            handles = pickle.loads(base64.b64decode(info["ipc_handles_pickled"]))
            n = len(info["names"])
            if not (len(info["dtype_names"]) == len(info["shapes"]) == len(handles) == n):
                return 500, {"error": {"message": "`names`, `dtype_names`, `shapes` and "
                                                  "`ipc_handles` must have the same size"}}
            tensors = {}
            for name, handle in zip(info["names"], handles):
                (gpu, args), = handle.items()
                tensors[name] = self.rebuild(gpu, args).clone() if self.rebuild else None
            self.weight_updates.append({**info, "handles": handles, "tensors": tensors,
                                        "during_update": getattr(self, "updating", False)})
        return 200, {"message": "Weights updated"}

    def completions(self, body):
        name = body.get("model")
        if name != self.model and name not in self.loras:
            return 404, {"error": {"message": f"The model `{name}` does not exist."}}
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        n, max_tokens = int(body.get("n", 1)), int(body.get("max_tokens", 16))
        stops = body.get("stop") or []
        greedy = float(body.get("temperature", 1.0)) == 0.0
        choices = []
        for p_i, prompt in enumerate(prompts):
            for k in range(n):
                if self.script is not None:
                    text = self.script(prompt, k)
                else:
                    text = _sample_chars(prompt + (name if name != self.model else ""), k,
                                         body.get("seed"), greedy, max_tokens)
                finish, stop_reason = "length", None
                for s in stops:
                    at = text.find(s)
                    if at != -1 and (stop_reason is None or at < text.find(stop_reason)):
                        stop_reason = s
                if stop_reason is not None:
                    at = text.find(stop_reason)
                    # vLLM: the text stops before the stop string, the token ids include the
                    # tokens that completed it.
                    ids = self.encode(text[:at + len(stop_reason)])
                    text, finish = text[:at], "stop"
                else:
                    ids = self.encode(text)
                    if self.script is not None:
                        finish = "stop"
                if len(ids) > max_tokens:  # only scripted text can be longer
                    ids = ids[:max_tokens]
                    text, finish = self.decode(ids), "length"
                temp = float(body.get("temperature", 1.0)) or 1.0
                scale = 1.0 / temp if self.logprobs_mode == "processed_logprobs" else 1.0
                lps = [logprob_of(t) * scale for t in ids]
                if self.mode == "nan_logprob" and lps:
                    lps[0] = float("nan")
                choice = {
                    "index": p_i * n + k, "text": text, "finish_reason": finish,
                    "stop_reason": stop_reason, "prompt_token_ids": self.encode(prompt),
                    "token_ids": ids,
                    "logprobs": {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": lps,
                                 "top_logprobs": [self.top(t, lp, int(body.get("logprobs") or 0),
                                                           scale) for t, lp in zip(ids, lps)],
                                 "text_offset": list(range(len(ids)))},
                }
                if self.mode == "no_token_ids":
                    del choice["token_ids"]
                choices.append(choice)
        if self.mode == "wrong_count":
            choices = choices[:-1]
        # vLLM returns choices in completion order, not index order: scramble to prove we sort.
        choices = choices[1::2] + choices[0::2]
        body = {"id": "cmpl-fake", "object": "text_completion", "model": name, "choices": choices,
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
        if self.mode == "nan_logprob":
            # json.dumps writes NaN, which Python's json (and vLLM's answer) carry through.
            pass
        return 200, body

    @staticmethod
    def top(token: int, lp: float, k: int, scale: float) -> dict:
        """The sampled token plus the k "most likely" ones (ids 97.., as vLLM: the sampled one
        merged in); in processed mode their logprobs depend on the temperature."""
        out = {f"token_id:{97 + j}": logprob_of(97 + j) * scale for j in range(k)}
        out[f"token_id:{token}"] = lp
        return out

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            return [ord(c) for c in text]
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return "".join(chr(i) for i in ids)
        return self.tokenizer.decode(ids)

    # ---- lifecycle ----------------------------------------------------------------------------
    def start(self) -> "FakeVLLM":
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()

    def paths(self) -> list[str]:
        return [p for _, p, _ in self.requests]

    def calls(self) -> list[tuple[str, dict]]:
        """(path, parsed query) of every request, in order."""
        return list(zip(self.paths(), self.queries))


def main(argv: list[str]) -> int:
    """Standalone: `fake_vllm_server.py -m vllm.entrypoints.openai.api_server --model MODEL --port
    P ...` (accepts and ignores the other flags vLLM takes). FAKE_VLLM_EXIT=N exits at once with N.
    FAKE_VLLM_SCRIPT=toy-loop answers with `toy_loop_script`, tokenized by the tokenizer saved in
    MODEL; FAKE_VLLM_EVENTS=FILE records each weight reload as a JSON line."""
    import os

    if os.environ.get("FAKE_VLLM_EXIT"):
        print("fake vllm: failing on purpose (CUDA error: no kernel image)", file=sys.stderr)
        return int(os.environ["FAKE_VLLM_EXIT"])
    args = list(argv)
    assert args[:2] == ["-m", "vllm.entrypoints.openai.api_server"], args
    model = args[args.index("--model") + 1]
    port = int(args[args.index("--port") + 1])
    host = args[args.index("--host") + 1] if "--host" in args else "127.0.0.1"
    delay = float(os.environ.get("FAKE_VLLM_STARTUP_DELAY", "0"))
    with open(os.environ.get("FAKE_VLLM_ARGS_FILE", os.devnull), "w") as f:
        json.dump({"argv": argv, "env": {k: v for k, v in os.environ.items()
                                         if k.startswith("VLLM")}}, f)
    time.sleep(delay)
    script, tokenizer = SCRIPTS.get(os.environ.get("FAKE_VLLM_SCRIPT", "")), None
    if script is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
    fake = FakeVLLM(model=model, served_dir=model, port=port, host=host, script=script,
                    tokenizer=tokenizer)
    fake.events_path = os.environ.get("FAKE_VLLM_EVENTS")
    print(f"fake vllm serving {model} on {fake.url}", flush=True)
    try:
        fake.server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
