"""Process-group signalling shared by the launchers (vLLM server, `selfplay serve`'s stack)."""

from __future__ import annotations

import os
import subprocess


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Send `sig` to the process group `proc` leads (started with start_new_session=True). The
    group may outlive its leader (vLLM's engine core, a worker's flow runs); a group that is
    gone is not an error."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
