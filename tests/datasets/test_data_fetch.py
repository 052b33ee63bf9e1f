"""`selfplay data fetch`: pinned release files from a local mirror or over HTTP, each checked
against its sha256 before it lands; the loaders then read the fetched root."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from selfplay_core.datasets.sources import SOURCES, fetch
from selfplay_core.problems import InputError

MIRROR = Path(os.environ["SELFPLAY_DATA"])


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "selfplay_cli.main", "data", *args],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


@pytest.fixture()
def served(tmp_path):
    """A real HTTP server on loopback serving a folder (the release files' stand-in host)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_fetch_from_a_mirror_lands_every_file_byte_identical_and_the_loaders_read_it(tmp_path):
    out = tmp_path / "data"
    proc = cli("fetch", "--to", str(out), "--mirror", str(MIRROR))
    assert proc.returncode == 0, proc.stderr
    for src in SOURCES:
        assert _sha(out / src.rel) == _sha(MIRROR / src.rel)
        assert f"{src.rel}: copied from" in proc.stdout
    again = cli("fetch", "--to", str(out), "--mirror", str(MIRROR))
    assert again.returncode == 0 and again.stdout.count("already there") == len(SOURCES)
    code = ("from selfplay_core.datasets.evalplus import load_humanevalplus, load_mbppplus\n"
            "print(len(load_humanevalplus()[0]), len(load_mbppplus()[0]))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "SELFPLAY_DATA": str(out)}, timeout=300)
    assert loaded.stdout.split() == ["164", "378"], loaded.stderr   # SOURCE.md's record counts


def test_a_corrupt_mirror_file_is_one_error_and_nothing_lands(tmp_path):
    bad = tmp_path / "mirror"
    shutil.copytree(MIRROR / "humaneval", bad / "humaneval")
    f = bad / "humaneval" / "HumanEval.jsonl.gz"
    data = bytearray(f.read_bytes())
    data[100] ^= 0xFF
    f.write_bytes(bytes(data))
    out = tmp_path / "data"
    proc = cli("fetch", "humaneval", "--to", str(out), "--mirror", str(bad))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "humaneval/HumanEval.jsonl.gz" in lines[0] and "sha256" in lines[0]
    assert "Traceback" not in proc.stderr
    assert not (out / "humaneval" / "HumanEval.jsonl.gz").exists()
    assert list((out / "humaneval").iterdir()) == []      # no temp file left behind


def test_download_over_http_checks_the_hash(tmp_path, served):
    www, base = served
    src = next(s for s in SOURCES if s.dataset == "humaneval")
    (www / "good").mkdir()
    shutil.copyfile(MIRROR / src.rel, www / "good" / src.name)
    (www / "short").mkdir()
    (www / "short" / src.name).write_bytes((MIRROR / src.rel).read_bytes()[:1000])
    out = tmp_path / "data"
    with pytest.raises(InputError, match="sha256"):
        fetch(out, ("humaneval",), urls={src.rel: f"{base}/short/{src.name}"})
    assert not (out / src.rel).exists()
    done = fetch(out, ("humaneval",), urls={src.rel: f"{base}/good/{src.name}"})
    assert [d.how for d in done] == ["download"]
    assert _sha(out / src.rel) == _sha(MIRROR / src.rel)


def test_an_unreachable_release_host_says_what_to_do(tmp_path):
    with socket.socket() as s:       # a port nothing listens on: a real refused connection
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = next(s for s in SOURCES if s.dataset == "mbpp")
    url = f"http://127.0.0.1:{port}/{src.name}"
    with pytest.raises(InputError) as e:
        fetch(tmp_path, ("mbpp",), urls={src.rel: url}, timeout_s=5)
    assert url in str(e.value) and "--mirror" in str(e.value)


def test_unknown_datasets_and_a_missing_mirror_fail_before_any_work(tmp_path):
    proc = cli("fetch", "humanevalplus", "lcb-private", "--to", str(tmp_path))
    assert proc.returncode == 2 and "unknown dataset(s) lcb-private" in proc.stderr
    proc = cli("fetch", "--to", str(tmp_path), "--mirror", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "no such folder" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_sources_name_the_public_releases_without_network():
    proc = cli("sources")
    assert proc.returncode == 0
    for src in SOURCES:
        assert src.url in proc.stdout and src.sha256 in proc.stdout
        assert src.url.startswith("https://")
    assert "livecodebench/code_generation_lite" in proc.stdout
