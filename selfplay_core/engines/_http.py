"""A small JSON-over-HTTP client with a hard deadline per request (standard library only).

Why not `requests`/`httpx`: their timeouts bound each socket operation, not the whole exchange,
so a server that trickles bytes can hold a caller for ever; here one deadline covers connect,
send and the full read. It also keeps the CPU install free of another dependency.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any
from urllib.parse import urlencode, urlsplit

from selfplay_core.engines.errors import (EngineTimeout, MalformedResponse, ServerHTTPError,
                                          ServerUnreachable)

_CHUNK = 1 << 16


def _server_message(raw: bytes) -> str:
    """The error text a server put in its body: vLLM/FastAPI use {"error": {"message"}},
    {"message"} or {"detail"}; anything else is shown as text (shortened)."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        body = json.loads(text)
    except ValueError:
        return text[:500] or "(empty body)"
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        for key in ("message", "detail", "error"):
            if body.get(key):
                return str(body[key])[:500]
    return text[:500]


class JSONClient:
    def __init__(self, base_url: str, *, name: str = "server"):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{name} URL must look like http://HOST:PORT, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.name = name
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")

    def request(self, method: str, path: str, body: Any = None, *, timeout_s: float,
                params: dict | None = None, expect_json: bool = True) -> Any:
        """Send one request and return the decoded JSON body (or the text when `expect_json`
        is false; None for an empty body). Raises one of the engine errors on any failure."""
        # doseq: a list value becomes repeated keys (?tags=a&tags=b), what FastAPI's getlist reads;
        # without it vLLM's /wake_up would get one tag named "['a', 'b']" and wake nothing.
        target = self._prefix + path + (f"?{urlencode(params, doseq=True)}" if params else "")
        where = f"{method} {self.base_url}{path}"
        deadline = time.monotonic() + timeout_s
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=max(0.001, timeout_s))
        try:
            conn.request(method, target, body=payload, headers=headers)
            conn.sock.settimeout(max(0.001, deadline - time.monotonic()))
            resp = conn.getresponse()
            chunks = []
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                conn.sock.settimeout(left)
                chunk = resp.read(_CHUNK)
                if not chunk:
                    break
                chunks.append(chunk)
            raw = b"".join(chunks)
        except (TimeoutError, socket.timeout):
            raise EngineTimeout(f"{where}: no complete answer within {timeout_s:g} s") from None
        except (ConnectionError, OSError, http.client.HTTPException) as e:
            reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
            raise ServerUnreachable(f"{self.name} at {self.base_url} is unreachable or dropped the "
                                    f"connection ({reason}) during {method} {path}; is it running?"
                                    ) from None
        finally:
            conn.close()
        if resp.status != 200:
            msg = _server_message(raw)
            raise ServerHTTPError(f"{where} -> HTTP {resp.status}: {msg}", resp.status, msg)
        if not expect_json:
            return raw.decode("utf-8", "replace")
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            snippet = raw[:200].decode("utf-8", "replace")
            raise MalformedResponse(f"{where}: answer is not JSON: {snippet!r}") from None
