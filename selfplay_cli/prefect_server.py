"""Prefect's temporary API server, out of reach of the terminal's Ctrl-C.

A flow run without PREFECT_API_URL starts a temporary Prefect server as a child process in the
CLI's process group. Ctrl-C sends SIGINT to that whole group, so the server died with the
first Ctrl-C while the run was still stopping cleanly (loop/interrupt.py), and the run's last
API calls ended in connection-refused tracebacks. So the CLI starts that server itself, before
the flow, in a process group of its own; it still ends with the CLI: Prefect stops it at exit,
and the kernel sends it SIGTERM if the CLI dies without exiting (PR_SET_PDEATHSIG, Linux).

Prefect offers no option for this: its server module is given a `subprocess` whose Popen adds
the two settings (prefect/server/api/server.py, SubprocessASGIServer._run_uvicorn_command).
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
import sys
import types

_PR_SET_PDEATHSIG = 1


def _apart() -> None:  # in the child, between fork and exec
    os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def start_temporary_server() -> None:
    """Start Prefect's temporary server now (a no-op where PREFECT_API_URL names a server);
    the flow run then uses this one."""
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        return
    from prefect.server.api import server as prefect_server

    shim = types.ModuleType("subprocess")
    shim.__dict__.update(subprocess.__dict__)
    shim.Popen = functools.partial(subprocess.Popen, preexec_fn=_apart)
    prefect_server.subprocess = shim
    prefect_server.SubprocessASGIServer().start()
