"""Acceptance: the MLflow run page a run's summary links to opens in MLflow's machine-learning
view, as a person sees it in a browser (headless Chromium rendering the real MLflow server's UI).

MLflow 3.17's UI opens on its GenAI view (Evaluations, Judges, Prompts) unless the link says
`?workflowType=machine_learning`; the experiment's `mlflow.experimentKind` tag, which this
project sets, is not read by that build (tracking/mlflow_run.py). The control case, the same
page without the parameter, shows the GenAI view: the check can fail."""

import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rendered_text(url: str, screenshot: Path) -> str:
    """The page's text after its scripts ran, and a screenshot of it."""
    flags = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=15000",
             "--window-size=1400,900"]
    subprocess.run(flags + [f"--screenshot={screenshot}", url], capture_output=True, timeout=180, check=True)
    dom = subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=180, check=True).stdout
    return re.sub(r"<[^>]+>", " ", dom)


@pytest.mark.skipif(CHROMIUM is None, reason="needs a Chromium binary (chromium, chromium-browser or google-chrome)")
def test_the_printed_run_link_opens_the_machine_learning_view(tmp_path):
    from selfplay_cli.serve import bin_of, run_url
    from selfplay_core.tracking.mlflow_run import RunTracker

    store = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = RunTracker(store, "selfplay-toy", run_name="view", tags={"method": "gasp"})
    tracker.log_metrics({"eval/all/pass@1": 0.5}, step=0)
    tracker.finish("FINISHED")
    exp = tracker.client.get_experiment(tracker.experiment_id)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"

    port = free_port()
    server = subprocess.Popen([bin_of("mlflow"), "server", "--backend-store-uri", store, "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "the MLflow server did not start"
                time.sleep(0.5)
        link = run_url(f"http://127.0.0.1:{port}", tracker.experiment_id, tracker.run_id)
        ml = rendered_text(link, tmp_path / "run-page-ml.png")
        genai = rendered_text(link.split("?")[0], tmp_path / "run-page-default.png")
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"\nscreenshots: {tmp_path / 'run-page-ml.png'}, {tmp_path / 'run-page-default.png'}")
    # The machine-learning view: the model registry in the side bar, no GenAI evaluation tools.
    assert "view" in ml and "Model registry" in ml and "Judges" not in ml and "Evaluation runs" not in ml
    # Without the parameter, 3.17's default: the GenAI view.
    assert "Judges" in genai and "Evaluation runs" in genai
    assert (tmp_path / "run-page-ml.png").stat().st_size > 20_000
