"""The learning study's loop features in real runs of the committed toy checkpoint (no Prefect):
the curriculum lineage page, the start model's goalpost floor, the fixed-size student batch,
the end-of-run verdict, the oracle-curriculum arm and dynamic goalposts."""

import html
import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SMALL = ["iterations=2", "method.goalposts_per_iteration=3", "method.proposals_per_anchor=2",
         "student.samples_per_task=4", "student.batch_size=32", "eval.n=4", "eval.verdict_n=null", "eval.ks=[1, 4]",
         "eval.max_problems=8", "eval.goalpost_every=1", "eval.goalpost_k=4",
         "eval.goalpost_floor_n=16", "engine.max_new_tokens_teacher=160",
         "engine.max_new_tokens_student=64", "sandbox.workers=2"]


def _goalpost_file(tmp_path, ids, reserve=()):
    path = tmp_path / "goalposts.json"
    path.write_text(json.dumps({"format": "selfplay-goalposts/1", "ids": list(ids), "reserve": list(reserve)}))
    return path


def _run(tmp_path, name, sets, executor):
    from selfplay_core.config import load_config
    from selfplay_core.loop.driver import run_selfplay
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    cfg = load_config("configs/tiny-cpu.yaml", [f"model.path={ASSET_DIR}", f"out_dir={tmp_path / 'runs'}",
                                                f"tracking.run_name={name}", *SMALL, *sets])
    return run_selfplay(cfg, executor=executor), cfg


@pytest.fixture(scope="module")
def pool_ids():
    from selfplay_core.toyworld.splits import build_world

    return [p.id for p in build_world(0).goalpost_pool.problems if p.metadata["depth"] == 3][:40]


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_gasp_run_writes_a_lineage_page_floor_fill_and_verdict(tmp_path, executor, pool_ids):
    from mlflow.tracking import MlflowClient

    gp = _goalpost_file(tmp_path, pool_ids[:4])
    res, cfg = _run(tmp_path, "gasp", [f"world.goalposts={gp}", "world.max_goalposts=null",
                                       "student.fill=replay"], executor)
    st = json.loads((Path(res.run_dir) / "state.json").read_text())

    # Lineage: every proposal of both iterations is a record; the page shows each goalpost, each
    # accepted lemma's question and pass rate, and each lift right after the lemma it came from.
    recs = st["lineage"]
    assert {r["iteration"] for r in recs} == {1, 2} and {r["kind"] for r in recs} <= {"lemma", "lift"}
    page = Path(res.lineage).read_text()
    text = _text(page)
    for g in pool_ids[:4]:
        assert g in text
    lemmas = [r for r in recs if r["kind"] == "lemma" and r["accepted"]]
    assert lemmas
    for r in lemmas:
        assert html.escape(r["question"]) in page
    lifts = [r for r in recs if r["kind"] == "lift" and r["accepted"]]
    for r in lifts:
        parent = next(p for p in recs if p["id"] == r["parent"])
        assert page.index(f'<tr id="{parent["id"]}"') < page.index(f'<tr id="{r["id"]}" class="lift')
    # The records agree with the proposal tables the run logged to MLflow (an independent path).
    client = MlflowClient(res.tracking_uri)
    table = json.loads(Path(client.download_artifacts(res.run_id, "samples/proposals_step0001.json",
                                                      str(tmp_path))).read_text())
    col = {c: i for i, c in enumerate(table["columns"])}
    logged = {(row[col["question"]][:240], round(row[col["pass_rate"]], 6))
              for row in table["data"] if row[col["accepted"]]}
    mine = {(r["question"], round(r["pass_rate"], 6)) for r in recs if r["iteration"] == 1 and r["accepted"]}
    assert mine and mine <= logged
    assert "lineage/lineage.html" in [a.path for a in client.list_artifacts(res.run_id, "lineage")]

    # The floor: expected goalposts hit by k start-model samples, from floor_n samples each.
    floor = st["goalpost_floor"]
    assert floor["n"] == 16 and 0 <= floor["floor"] <= floor["hits_at_n"] <= 4
    assert floor["floor"] <= floor["floor_union"] <= floor["hits_at_n"] + 1e-9
    hist = {m.step: m.value for m in client.get_metric_history(res.run_id, "goalposts/floor")}
    assert sorted(hist) == [0, 1, 2] and len(set(hist.values())) == 1

    # The student batch is topped up to batch_size / samples_per_task tasks when it can be.
    it2 = st["history"][-1]
    assert it2["student/batch/own_tasks"] + it2.get("student/fill/tasks", 0) <= 8

    # The verdict: the whole held-out split at step 0 and at the end, paired.
    assert len(st["eval_start"]) == len(st["eval_end"]) == 300
    assert len(res.verdict) == 2 and all("held-out pass@" in v and "problems" in v for v in res.verdict)
    diff = client.get_metric_history(res.run_id, "verdict/pass_at_4_diff")
    assert len(diff) == 1 and diff[0].step == 2


def test_oracle_curriculum_has_no_teacher_rollouts_and_trains_in_band(tmp_path, executor, pool_ids):
    gp = _goalpost_file(tmp_path, pool_ids[:6])
    res, cfg = _run(tmp_path, "oracle", [f"world.goalposts={gp}", "world.max_goalposts=null",
                                         "diagnostics.oracle_curriculum=true", "eval.verdict=false"], executor)
    st = json.loads((Path(res.run_dir) / "state.json").read_text())
    hist = st["history"]
    from mlflow.tracking import MlflowClient
    client = MlflowClient(res.tracking_uri)
    tr = client.get_metric_history(res.run_id, "learner/teacher_rollouts")
    assert all(m.value == 0 for m in tr)
    assert all(r["faithful"] for r in st["lineage"] if r["accepted"])     # true variants
    lemma_band = tuple(cfg.method.lemma_band)
    for r in st["lineage"]:
        if r["trained"] and r["kind"] == "lemma":
            assert lemma_band[0] <= r["pass_rate"] <= lemma_band[1]
    assert any(h.get("teacher/lemma/proposals", 0) > 0 for h in hist)


def test_dynamic_goalposts_retire_what_is_solved_and_promote_the_reserve(tmp_path, executor):
    from selfplay_core.engines.base import SamplingParams
    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.solve import solve
    from selfplay_core.toyworld.bootstrap import ASSET_DIR
    from selfplay_core.toyworld.splits import build_world

    # The two pool tasks the start model solves most often are "goalposts" it will hit.
    pool = [p for p in build_world(0).goalpost_pool.problems if p.metadata["depth"] == 3][:120]
    res = solve(HFEngine(str(ASSET_DIR)), executor, pool, 8,
                SamplingParams(temperature=1.0, max_new_tokens=64, seed=5))
    ranked = sorted(res, key=lambda r: -r.c)
    easy = [r.problem.id for r in ranked[:2]]
    assert ranked[1].c >= 2
    reserve = [r.problem.id for r in ranked[-6:]]
    gp = _goalpost_file(tmp_path, easy, reserve)
    run, _ = _run(tmp_path, "dyn", [f"world.goalposts={gp}", "world.max_goalposts=null", "iterations=3",
                                    "eval.goalpost_k=16", "method.dynamic_goalposts={solved_checks: 1}",
                                    "eval.verdict=false"], executor)
    st = json.loads((Path(run.run_dir) / "state.json").read_text())
    dyn = st["method_state"]["dynamic_goalposts"]
    # The rule against the run's own goalpost matrix: a fixed goalpost hit at a check after the
    # start is retired at that check (solved_checks=1), once, and each retirement promotes the
    # next reserve candidate in order.
    retired = {r["id"]: r["at"] for r in dyn["retired"]}
    hits = {}
    for label, row in list(zip(st["goalpost_labels"], st["goalpost_rows"]))[1:]:
        for gid, v in zip(st["goalpost_ids"], row):
            if v > 0 and gid not in hits:
                hits[gid] = label
    assert hits, "neither easy goalpost was hit: the test's premise failed"
    for gid, label in hits.items():
        if label != st["goalpost_labels"][-1]:   # the last check has no next iteration to apply it
            assert retired[gid] == label
    assert [p["id"] for p in dyn["promoted"]] == reserve[:len(dyn["promoted"])]
    assert len(dyn["promoted"]) == len(retired)
    # a promoted goalpost anchors lemmas afterwards; a retired one not after its retirement
    promoted = {p["id"]: int(p["at"].split()[-1]) for p in dyn["promoted"]}
    for r in st["lineage"]:
        if r["kind"] != "lemma":
            continue
        if r["goalpost"] in retired:
            assert r["iteration"] <= int(retired[r["goalpost"]].split()[-1])
        if r["goalpost"] in promoted:
            assert r["iteration"] > promoted[r["goalpost"]]
    assert {r["goalpost"] for r in st["lineage"] if r["kind"] == "lemma"} & set(promoted)
