"""PROTOCOL TEST DOUBLE — this is not vLLM.

A small HTTP server that implements the subset of vLLM's OpenAI-compatible server (with its
development endpoints) that `VLLMEngine` and `selfplay vllm-serve` use, so that the engine's
request/response handling, timeouts, error paths and weight-sync requests can be tested on a
machine where vLLM cannot run. It generates no language: completions are a deterministic function
of (prompt, sample index, seed), one character per token (token id = ord(char)), and every token's
logprob is derived from its id. Shapes and field names follow vLLM's answers:

  GET  /health                      200, empty body
  GET  /v1/models                   {"data": [{"id": MODEL, ...}]}
  GET  /server_info                 {"vllm_config": {"weight_transfer_config": {...}}}
  POST /v1/completions              choices[i] = {index, text, token_ids, prompt_token_ids,
                                    finish_reason, stop_reason, logprobs: {tokens: ["token_id:N"],
                                    token_logprobs, top_logprobs, text_offset}}
  POST /collective_rpc              {"method": "reload_weights"} -> records what is in the folder
  POST /reset_prefix_cache          {"success": true}
  POST /v1/load_lora_adapter        plain text "Success: ..."
  POST /sleep?level=N, /wake_up     200 (wake_up?tags=weights&tags=kv_cache: repeated keys,
                                    read like FastAPI's list query parameter; `queries` keeps them)

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
        self.queries: list[dict[str, list[str]]] = []  # each request's query, parsed as vLLM does
        self.reloads: list[dict] = []
        self.loras: dict[str, str] = {}
        self.sleeping = False
        self.dev_mode = True
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

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self._thread: threading.Thread | None = None

    # ---- routes -------------------------------------------------------------------------------
    def route(self, method, path, query, body):
        dev_only = {"/server_info", "/collective_rpc", "/reset_prefix_cache", "/sleep", "/wake_up"}
        if path in dev_only and not self.dev_mode:
            return 404, {"detail": "Not Found"}
        if method == "GET" and path == "/health":
            return 200, b"", "text/plain"
        if method == "GET" and path == "/v1/models":
            data = [{"id": self.model, "object": "model", "root": self.model, "parent": None}]
            data += [{"id": n, "object": "model", "root": p, "parent": self.model}
                     for n, p in self.loras.items()]
            return 200, {"object": "list", "data": data}
        if method == "GET" and path == "/server_info":
            return 200, {"vllm_config": {"weight_transfer_config": {"backend": "nccl"}}}
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
            self.sleeping = True
            return 200, b"", "text/plain"
        if method == "POST" and path == "/wake_up":
            self.sleeping = False
            return 200, b"", "text/plain"
        return 404, {"detail": "Not Found"}

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
                lps = [logprob_of(t) for t in ids]
                if self.mode == "nan_logprob" and lps:
                    lps[0] = float("nan")
                choice = {
                    "index": p_i * n + k, "text": text, "finish_reason": finish,
                    "stop_reason": stop_reason, "prompt_token_ids": self.encode(prompt),
                    "token_ids": ids,
                    "logprobs": {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": lps,
                                 "top_logprobs": [{f"token_id:{t}": lp} for t, lp in zip(ids, lps)],
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


def main(argv: list[str]) -> int:
    """Standalone: `fake_vllm_server.py [-m vllm.entrypoints.cli.main] serve MODEL --port P ...`
    (accepts and ignores the other flags vLLM takes). FAKE_VLLM_EXIT=N exits at once with N.
    FAKE_VLLM_SCRIPT=toy-loop answers with `toy_loop_script`, tokenized by the tokenizer saved in
    MODEL; FAKE_VLLM_EVENTS=FILE records each weight reload as a JSON line."""
    import os

    if os.environ.get("FAKE_VLLM_EXIT"):
        print("fake vllm: failing on purpose (CUDA error: no kernel image)", file=sys.stderr)
        return int(os.environ["FAKE_VLLM_EXIT"])
    args = list(argv)
    if args[:2] == ["-m", "vllm.entrypoints.cli.main"]:
        args = args[2:]
    assert args and args[0] == "serve", args
    model = args[1]
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
