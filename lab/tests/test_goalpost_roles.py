"""lab/goalpost_roles.py end to end on the committed toy checkpoint and its shipped
goalpost set: every proposal and every student sample is counted once in its table (the counts
are the flags'), and a goalpost file of another world is one clear error before sampling."""

import json
import re

from lab.tests.run_script import run_lab_script


def test_both_roles_are_counted_on_the_shipped_goalposts(tmp_path):
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    ids = json.loads((ASSET_DIR / "goalposts.json").read_text())["ids"]   # the mined set
    r = run_lab_script("goalpost_roles.py", ASSET_DIR, ASSET_DIR / "goalposts.json", "--proposals", 2, "--others", 5,
                      "--others-proposals", 2, "--samples", 3, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert re.search(rf"\| its {len(ids)} goalposts x 2 \| {2 * len(ids)} \|", out), out
    assert re.search(r"\| 5 other depth-\d pool tasks x 2 \| 10 \|", out), out
    # per source: covered sources and selectable ones, out of the sources of the row
    for n_sources in (len(ids), 5):
        m = re.search(rf"\| (\d+)/{n_sources} \| (\d+)/{n_sources} \|$", out, re.M)
        assert m, out
        covered, selectable = map(int, m.groups())
        assert selectable <= covered <= n_sources
    # the edited-lemma rows: one forced deletion per source prompt, shares in [0, 1]
    for name, n in ((rf"its {len(ids)} goalposts x 2", 2 * len(ids)), (r"5 other depth-\d pool tasks x 2", 10)):
        m = re.search(rf"^\| {name} \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)
        assert m, out
        valid, faithful, exact = map(float, m.groups()[1:])
        assert int(m.group(1)) <= n and 0 <= exact <= faithful <= valid <= 1
    head = re.search(r"(\d+) pass, (\d+) unparsed, (\d+) failed programs", out)
    assert head and sum(map(int, head.groups())) == 3 * len(ids), out
    classes = [int(m) for m in re.findall(r"^\| [a-z_]+ \| (\d+) \| [\d.]+ \|$", out, re.M)]
    assert sum(classes) == int(head.group(3))


def test_match_reps_keeps_other_tasks_with_a_goalposts_representations(tmp_path):
    from selfplay_core.toyworld.bootstrap import ASSET_DIR
    from selfplay_core.toyworld.splits import build_world

    ids = json.loads((ASSET_DIR / "goalposts.json").read_text())["ids"]
    pool = build_world(0).goalpost_pool
    tasks = dict(zip([p.id for p in pool.problems], pool.tasks))
    deepest = max(t.depth for t in tasks.values())
    reps = {(tasks[g].in_rep, tasks[g].out_rep) for g in ids}
    # counted here from the pool itself, not by the script's filter
    n = sum(1 for i, t in tasks.items() if t.depth == deepest and i not in ids and (t.in_rep, t.out_rep) in reps)
    assert 0 < n < sum(1 for i, t in tasks.items() if t.depth == deepest and i not in ids)
    r = run_lab_script("goalpost_roles.py", ASSET_DIR, ASSET_DIR / "goalposts.json", "--proposals", 1,
                      "--others", 1000, "--samples", 1, "--match-reps", timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.search(rf"^\| {n} other depth-{deepest} pool tasks with a goalpost's representations \| {n} \|",
                     r.stdout, re.M), r.stdout


def test_goalposts_of_another_world_are_one_clear_error(tmp_path):
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    path = tmp_path / "goalposts.json"
    path.write_text(json.dumps(["toy/goalpost_pool/d5/9999"]))
    r = run_lab_script("goalpost_roles.py", ASSET_DIR, path, timeout=300)
    assert r.returncode == 2 and "not in this world's goalpost pool" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_lab_script("goalpost_roles.py", ASSET_DIR, ASSET_DIR / "goalposts.json", "--others-proposals", 0, timeout=300)
    assert r.returncode == 2 and "--others-proposals must be at least 1" in r.stderr
    path.write_text(json.dumps({"ids": 3}))
    r = run_lab_script("goalpost_roles.py", ASSET_DIR, path, timeout=300)
    assert r.returncode == 2 and "expected a list of goalpost ids" in r.stderr
