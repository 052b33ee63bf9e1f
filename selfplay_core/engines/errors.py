"""Errors raised by generation engines, in-process (hf) or talking to another process (vllm).

Every failure of an engine ends in exactly one of these, with a one-line message that names the
server or the request and what to do, so that a run stops with a readable reason instead of
hanging or dying in a traceback from the HTTP layer or the model code.
"""

from __future__ import annotations


class EngineError(RuntimeError):
    """Base class: the engine could not do what was asked. Every engine (hf in-process, vllm
    over HTTP) raises only subclasses of this one class, so a caller (the CLI) catches one."""


class InvalidRequest(EngineError, ValueError):
    """The request itself is wrong: a prompt longer than the model's context, bad sampling
    parameters, weights that do not fit the model. Fix the input or the config."""


class ServerUnreachable(EngineError):
    """Nothing answers at the server's address (refused, reset, DNS)."""


class EngineTimeout(EngineError):
    """The server (or a weight transfer) did not answer within its time limit."""


class ServerHTTPError(EngineError):
    """The server answered with an HTTP error; `status` and the server's own message are kept."""

    def __init__(self, message: str, status: int, server_message: str):
        super().__init__(message)
        self.status = status
        self.server_message = server_message


class MalformedResponse(EngineError):
    """The server answered 200 with something that is not what the protocol promises."""


class WeightSyncError(EngineError):
    """New weights could not be handed to the server."""
