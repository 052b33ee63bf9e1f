"""The Prefect UI's run form, as a person sees it (headless Chromium): the `method` section is a
form too — a choice per registered method, each with its fields — not a raw JSON editor."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.browser import render

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DEPLOY = """
import asyncio
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from flows.selfplay import selfplay

async def pool():
    async with get_client() as c:
        await c.create_work_pool(WorkPoolCreate(name="form-pool", type="process"))

asyncio.run(pool())
print(selfplay.from_source({repo!r}, "flows/selfplay.py:selfplay").deploy(
    name="form", work_pool_name="form-pool", print_next_steps=False))
"""


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_the_run_form_shows_the_method_as_fields(tmp_path):
    from selfplay_cli.serve import Processes, wait_http
    from selfplay_core.methods import registered

    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_UI_API_URL": api,
           "PREFECT_HOME": str(tmp_path / "home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    procs = Processes()
    server = procs.start("prefect server", [sys.executable, "-m", "prefect", "server", "start",
                                            "--host", "127.0.0.1", "--port", str(port)],
                         env, tmp_path / "server.log")
    try:
        wait_http(f"{api}/health", 180, server, "Prefect server")
        out = subprocess.run([sys.executable, "-c", DEPLOY.format(repo=str(REPO))], env=env,
                             cwd=REPO, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        deployment = out.stdout.strip().splitlines()[-1]
        shot = tmp_path / "prefect-run-form.png"
        html = render(f"http://127.0.0.1:{port}/deployments/deployment/{deployment}/run", shot)
    finally:
        procs.stop(timeout=15)
    assert shot.stat().st_size > 10_000          # a page was drawn (the PNG is for a person)
    text = _text(html)
    section = text[text.index("Method"):]
    # One choice per registered method, labelled by its name, and the default's fields.
    labels = re.findall(r"\S+", section[:400])
    assert set(registered()) <= set(labels), section[:400]
    for field in ("Lemma Band", "Lift Band", "Goalposts Per Iteration", "Proposals Per Anchor"):
        assert field in section, field
    assert '"lemma_band"' not in section and '"advantage"' not in section   # no JSON editor
