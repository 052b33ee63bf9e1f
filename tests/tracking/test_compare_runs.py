"""`selfplay compare` on runs in a real (local) MLflow store, logged the way the loop logs."""

import json
import struct
import subprocess
import sys
from pathlib import Path

from selfplay_core.tracking.mlflow_run import RunTracker, local_tracking_uri

ROOT = Path(__file__).resolve().parents[2]


def fake_run(uri, method, seed, pass1, solved_rows):
    t = RunTracker(uri, "cmp", run_name=f"{method}-s{seed}", tags={"method": method, "seed": str(seed)})
    for step, v in enumerate(pass1):
        t.log_metrics({"eval/all/pass@1": v, "goalposts/solved": sum(x > 0 for x in solved_rows[min(step, len(solved_rows) - 1)])}, step)
    t.log_text(json.dumps({"goalposts": ["g0", "g1", "g2"], "checkpoints": ["base", "it1", "it2"],
                           "pass_rate": solved_rows}), "goalposts/matrix.json")
    t.finish()
    return t.run_id


def test_compare_prints_the_table_with_union_over_seeds_and_writes_a_png(tmp_path):
    uri = local_tracking_uri(str(tmp_path / "mlruns"))
    a = fake_run(uri, "gasp", 0, [0.1, 0.2, 0.3], [[0, 0, 0], [0.1, 0, 0], [0, 0, 0]])
    b = fake_run(uri, "gasp", 1, [0.1, 0.15, 0.25], [[0, 0, 0], [0, 0, 0], [0, 0.2, 0]])
    c = fake_run(uri, "rlvr", 0, [0.1, 0.2, 0.2], [[0, 0, 0], [0, 0, 0], [0, 0, 0]])
    png = tmp_path / "cmp.png"
    r = subprocess.run([sys.executable, "-m", "selfplay_cli.main", "compare", a, b, c, "--tracking-uri", uri,
                        "--metrics", "eval/all/pass@1,goalposts/solved", "--png", str(png)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "gasp-s0" in out and "0.300/0.300" in out and "0.250/0.250" in out
    assert "gasp: 2/3 over 2 run(s)" in out       # g0 by seed 0, g1 by seed 1
    assert "rlvr: 0/3 over 1 run(s)" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">I", png.read_bytes()[16:20])[0] > 100


def test_unknown_run_is_one_clear_error(tmp_path):
    uri = local_tracking_uri(str(tmp_path / "mlruns"))
    r = subprocess.run([sys.executable, "-m", "selfplay_cli.main", "compare", "deadbeef", "--tracking-uri", uri],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "not found" in r.stderr and "Traceback" not in r.stderr


def test_compare_shows_the_solve_asymptote_of_each_run_that_fits_one(tmp_path):
    from selfplay_core.tracking import compare

    uri = local_tracking_uri(str(tmp_path / "mlruns"))
    t = RunTracker(uri, "cmp", run_name="sgs-s0", tags={"method": "sgs", "seed": "0"})
    for step, (rate, a) in enumerate([(0.1, None), (0.2, 0.5), (0.25, 0.41)], start=1):
        t.log_metrics({"targets/cumulative_solve_rate": rate, **({"targets/fit/A": a} if a else {})}, step)
    t.finish()
    sgs = t.run_id
    gasp = fake_run(uri, "gasp", 0, [0.1, 0.2], [[0, 0, 0], [0, 0, 0]])
    rows = compare.collect(uri, [sgs, gasp], ("eval/all/pass@1",))
    assert rows[0].asymptote == 0.41 and rows[0].solve_rate == 0.25 and rows[1].asymptote is None
    text = compare.render_table(rows, ("eval/all/pass@1",))
    head, sgs_line, gasp_line = text.splitlines()[:3]
    assert "asymptote A (fit)" in head and "target solve rate" in head
    assert sgs_line.split()[-2:] == ["0.250", "0.410"] and gasp_line.split()[-2:] == ["-", "-"]
