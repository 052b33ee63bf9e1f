"""The runner with an engine (a scripted test double of the Engine interface) and with samples."""

import dataclasses

import pytest

from selfplay_core.datasets.registry import load_benchmark
from selfplay_core.engines.base import Completion, Engine, SamplingParams
from selfplay_core.evaluation.passk import PassAtKError
from selfplay_core.evaluation.prompts import PromptTemplate
from selfplay_core.evaluation.runner import EvalConfig, HarnessFailure, evaluate
from selfplay_core.problems import InputError, Sample, Verdict

IDS = ["HumanEval/0", "HumanEval/2", "HumanEval/10", "HumanEval/32", "HumanEval/53", "HumanEval/130"]


class ScriptedEngine:
    """TEST DOUBLE for the Engine interface (not a model): for each prompt it returns completions
    from a script keyed by the prompt text, and records the sampling parameters it was given."""

    def __init__(self, script):
        self.script = script   # prompt -> function(j, sampling) -> completion text
        self.calls = []

    def generate(self, prompts, n, sampling):
        self.calls.append((len(prompts), n, sampling))
        return [[Completion(self.script[p](j, sampling), token_ids=[1, 2, 3]) for j in range(n)]
                for p in prompts]


@pytest.fixture(scope="module")
def he(executor):
    return load_benchmark("humaneval", ids=IDS, executor=executor)


def _body(bench, pid):
    p = bench.by_id()[pid]
    return bench.references[pid][len(p.prompt):]


def test_engine_run_with_continuations(he, executor):
    # Base-model style: the completion continues the prompt. Sample 0 is the canonical body,
    # the others a wrong body; greedy is right on every other problem.
    script = {}
    for i, p in enumerate(he.problems):
        right, wrong = _body(he, p.id), "    return None\n\n\nprint('demo output')\n"
        script[p.prompt] = (lambda right, wrong, i: lambda j, s: (
            (right if i % 2 == 0 else wrong) if s.greedy else (right if j == 0 else wrong)))(right, wrong, i)
    engine = ScriptedEngine(script)
    assert isinstance(engine, Engine)
    sampling = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=128, seed=3)
    cfg = EvalConfig(n=4, ks=[1, 2, 4], sampling=sampling, greedy=True, batch_problems=4)
    run = evaluate(he, executor, cfg, engine=engine, source_info={"model": "scripted"})
    m = run.report["metrics"]
    assert m == {"pass@1": pytest.approx(0.25), "pass@2": pytest.approx(0.5),
                 "pass@4": pytest.approx(1.0), "greedy_pass@1": pytest.approx(0.5)}
    # Batching: 6 problems in chunks of 4, one sampled and one greedy call per chunk.
    assert [(np, n) for np, n, _ in engine.calls] == [(4, 4), (4, 1), (2, 4), (2, 1)]
    assert engine.calls[0][2] == sampling and engine.calls[1][2].temperature == 0.0
    assert all(r["n"] == 4 and r["c"] == 1 for r in run.results)
    assert len(run.samples) == 6 * 5 and all(s.completion is not None for s in run.samples)


def test_engine_run_with_chat_style_completions(he, executor):
    script = {}
    for p in he.problems:
        fenced = f"Sure, here you go:\n```python\n{he.references[p.id]}\n```\nHope this helps!"
        script[p.id] = fenced
    template = PromptTemplate("file:test", "{id}")   # the prompt is the id: easy to script
    engine = ScriptedEngine({k: (lambda t: lambda j, s: t)(v) for k, v in script.items()})
    run = evaluate(he, executor, EvalConfig(n=2, ks=[1], template=template), engine=engine)
    assert run.report["metrics"] == {"pass@1": 1.0}
    assert run.report["sampling"]["template"]["name"] == "file:test"


def test_report_records_dataset_sampling_executor_and_timings(he, executor):
    engine = ScriptedEngine({p.prompt: (lambda b: lambda j, s: b)(_body(he, p.id)) for p in he.problems})
    cfg = EvalConfig(n=1, sampling=SamplingParams(temperature=0.5, top_p=0.8, max_new_tokens=64, seed=7))
    rep = evaluate(he, executor, cfg, engine=engine).report
    d = rep["dataset"]
    assert d["name"] == "humaneval" and d["version"].startswith("openai/human-eval")
    assert d["source_sha256"] == he.source_sha256 and d["content_hash"] == he.content_hash
    assert d["n_problems"] == 6 and d["filters"] == {"ids": sorted(IDS)}
    s = rep["sampling"]
    assert (s["n"], s["temperature"], s["top_p"], s["max_new_tokens"], s["seed"]) == (1, 0.5, 0.8, 64, 7)
    assert s["template"]["name"] == "plain" and len(s["template"]["sha256"]) == 64
    e = rep["executor"]
    assert e["isolation"] == executor.isolation and e["workers"] == 2 and e["backend"] == "local"
    from selfplay_core.datasets.limits import MIN_TIME_LIMIT_S
    assert e["early_exit"] is True and e["time_limit_s"]["min"] >= MIN_TIME_LIMIT_S
    t = rep["timings"]
    # The phases are disjoint parts of the whole run (rounded to ms each).
    assert t["verify_s"] > 0 and t["total_s"] >= t["verify_s"] + t["generate_s"] - 0.002
    assert rep["counts"]["samples"] == 6 and rep["counts"]["verdicts"] == {"passed": 6}
    assert rep["metrics"] == {"pass@1": 1.0}


def test_engine_errors(he, executor):
    bad = ScriptedEngine({})
    bad.generate = lambda prompts, n, s: [[Completion("x")]]  # wrong shape
    with pytest.raises(RuntimeError, match="malformed batch"):
        evaluate(he, executor, EvalConfig(n=1), engine=bad)
    with pytest.raises(PassAtKError, match="pass@5 needs n >= 5"):
        evaluate(he, executor, EvalConfig(n=2, ks=[1, 5]), engine=bad)


# ------------------------------------------------------------------------------------------------
# Samples mode
# ------------------------------------------------------------------------------------------------

def _mixed_samples(he):
    # (problem, right, wrong, broken) counts -> hand-computed pass@k below
    plan = {"HumanEval/0": (2, 1, 0), "HumanEval/2": (0, 3, 0), "HumanEval/10": (3, 0, 0),
            "HumanEval/32": (1, 2, 0), "HumanEval/53": (1, 1, 1), "HumanEval/130": (1, 1, 1)}
    out = []
    for pid, (r, w, b) in plan.items():
        entry = he.by_id()[pid].entry_point
        out += [Sample(pid, f"r{j}", he.references[pid]) for j in range(r)]
        out += [Sample(pid, f"w{j}", f"def {entry}(*a):\n    return 12345\n") for j in range(w)]
        out += [Sample(pid, f"b{j}", f"def {entry}(*a):\n    return (\n") for j in range(b)]
    return out


def test_samples_mix_scores_the_hand_computed_value(he, executor):
    run = evaluate(he, executor, EvalConfig(ks=[1, 2, 3]), samples=_mixed_samples(he))
    # per problem (n, c): (3,2) (3,0) (3,3) (3,1) (3,1) (3,1)
    # pass@1 = (2/3 + 0 + 1 + 1/3 + 1/3 + 1/3) / 6 = (8/3)/6 = 4/9
    # pass@2 = (1 + 0 + 1 + 2/3 + 2/3 + 2/3) / 6 = 4/6 = 2/3     [1 - C(2,2)/C(3,2) = 2/3]
    # pass@3 = (1 + 0 + 1 + 1 + 1 + 1) / 6 = 5/6
    assert run.report["metrics"] == {"pass@1": pytest.approx(4 / 9), "pass@2": pytest.approx(2 / 3),
                                     "pass@3": pytest.approx(5 / 6)}
    v = run.report["counts"]["verdicts"]
    assert v == {"passed": 8, "wrong_answer": 8, "compile_error": 2}
    assert run.report["sampling"]["n_per_problem"] == {"min": 3, "max": 3}


def test_samples_errors(he, executor):
    s = _mixed_samples(he)
    with pytest.raises(PassAtKError, match="pass@4 needs at least 4 samples"):
        evaluate(he, executor, EvalConfig(ks=[4]), samples=s)
    with pytest.raises(InputError, match=r"sample #1 \(sample_id 'x'\): field 'problem_id': unknown problem 'HumanEval/999'"):
        evaluate(he, executor, EvalConfig(), samples=[Sample("HumanEval/999", "x", "")])
    with pytest.raises(InputError, match="duplicate sample_id 'r0'"):
        evaluate(he, executor, EvalConfig(), samples=s + s[:1])
    with pytest.raises(InputError, match="--n 4 but 6 problem"):
        evaluate(he, executor, EvalConfig(samples_per_problem=4), samples=s)
    one = [x for x in s if x.problem_id == "HumanEval/0"]
    with pytest.raises(InputError, match="no samples for 5 of 6 problems"):
        evaluate(he, executor, EvalConfig(), samples=one)
    with pytest.raises(InputError, match="--greedy needs one sample with sample_id 'greedy'"):
        evaluate(he, executor, EvalConfig(greedy=True), samples=s)


def test_missing_problems_can_be_scored_as_failures(he, executor):
    one = [x for x in _mixed_samples(he) if x.problem_id == "HumanEval/10"]  # 3 right
    run = evaluate(he, executor, EvalConfig(ks=[1], missing="zero"), samples=one)
    assert run.report["metrics"]["pass@1"] == pytest.approx(1 / 6)
    assert run.report["counts"]["problems_without_samples"] == 5


def test_samples_cap_and_greedy_from_file(he, executor):
    s = _mixed_samples(he)
    greedy = [Sample(p.id, "greedy", he.references[p.id] if i < 3 else "def f(: pass")
              for i, p in enumerate(he.problems)]
    run = evaluate(he, executor, EvalConfig(ks=[1], greedy=True, samples_per_problem=2), samples=s + greedy)
    # first two samples per problem: (r0,r1) (w0,w1) (r0,r1) (r0,w0) (r0,w0) (r0,w0)
    assert run.report["metrics"] == {"pass@1": pytest.approx((1 + 0 + 1 + 0.5 * 3) / 6),
                                     "greedy_pass@1": pytest.approx(0.5)}


def test_samples_outside_a_filtered_selection_are_counted(executor):
    b = load_benchmark("lcb", window="test", platforms="atcoder")
    train_id = next(iter(b.excluded_ids))
    samples = [Sample("abc365_a", "1", "print(365)"), Sample(train_id, "1", "print(1)")]
    run = evaluate(b, executor, EvalConfig(missing="zero"), samples=samples)
    assert run.report["counts"]["samples_ignored_outside_selection"] == 1
    assert run.report["counts"]["samples"] == 1


class FlakyExecutor:
    """Fault injection around the REAL executor: samples named 'flaky' hit a harness error on
    their first run only, samples named 'broken' on every run."""

    def __init__(self, real):
        self.real, self.config, self.isolation = real, real.config, real.isolation
        self.seen = set()

    def verify(self, items, **kw):
        out = self.real.verify(items, **kw)
        res = []
        for (p, s), v in zip(items, out):
            key = (p.id, s.sample_id)
            if s.sample_id == "broken" or (s.sample_id == "flaky" and key not in self.seen):
                self.seen.add(key)
                v = dataclasses.replace(v, verdict=Verdict.harness_error, detail="injected")
            res.append(v)
        return res


def test_harness_errors_are_retried_then_left_out(he, executor):
    ex = FlakyExecutor(executor)
    pid = "HumanEval/0"
    ref = he.references[pid]
    samples = [Sample(p.id, "ok", he.references[p.id]) for p in he.problems]
    samples += [Sample(pid, "flaky", ref), Sample(pid, "broken", ref)]
    run = evaluate(he, ex, EvalConfig(ks=[1]), samples=samples)
    row = next(r for r in run.results if r["problem_id"] == pid)
    assert (row["n"], row["c"], row["harness_errors"]) == (2, 2, 1)   # flaky retried, broken left out
    assert run.report["counts"]["harness_errors_excluded"] == 1
    assert run.report["metrics"]["pass@1"] == 1.0
    # pass@3 would need the broken sample: scored over the problems that have enough, with a warning.
    samples3 = samples + [Sample(p.id, f"x{j}", he.references[p.id]) for p in he.problems[1:] for j in range(2)]
    run = evaluate(he, FlakyExecutor(executor), EvalConfig(ks=[3]), samples=samples3)
    assert run.report["metrics"]["pass@3"] == 1.0
    assert "pass@3 over 5 of 6 problems" in run.report["warnings"][0]


def test_excluded_harness_errors_are_reported_and_fail_past_the_share(he, executor):
    samples = [Sample(p.id, "ok", he.references[p.id]) for p in he.problems]
    one_broken = samples + [Sample("HumanEval/0", "broken", he.references["HumanEval/0"])]
    run = evaluate(he, FlakyExecutor(executor), EvalConfig(ks=[1]), samples=one_broken)
    assert any("1 of 7 samples ended in a sandbox harness error" in w for w in run.report["warnings"])
    # 3 of 9 samples (33 %) is past the default share (5 %): no score is reported.
    three = samples + [Sample(pid, "broken", he.references[pid]) for pid in IDS[:3]]
    with pytest.raises(HarnessFailure, match="3 of 9 samples.*max_harness_error_share"):
        evaluate(he, FlakyExecutor(executor), EvalConfig(ks=[1]), samples=three)


def test_selecting_ids_outside_the_window_is_an_error():
    with pytest.raises(InputError, match="outside the selection made by the filters"):
        load_benchmark("lcb", window="train", ids=["abc365_a"])
    b = load_benchmark("lcb", ids=["abc365_a", "3543"])
    assert {p.id for p in b.problems} == {"abc365_a", "3543"}
    assert b.filters["ids"] == ["3543", "abc365_a"] and b.content_hash != load_benchmark("lcb").content_hash
