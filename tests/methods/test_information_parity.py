"""Information parity (issue 50): a goalpost reaches a prompt as its question and the examples
the question shows, never its reference program, hidden tests or expected outputs.

One iteration each of GASP, GASP + RLVR, SGS and CompassPlay (its reference set the goalposts)
runs on the toy world with the committed checkpoint, and the real engines are wrapped so that
every prompt they receive (the policy's, which also proposes, and SGS's frozen Guide's) is
recorded with what they wrote back. No prompt may contain a goalpost's reference program (or
its body), its tests as the code renders them, or its task key, unless the engine itself wrote
that text earlier in the run (a program the model derived from a question is not a leak). The
same on the real-data world's prompt form: the GASP lemma prompt of LiveCodeBench goalposts.
With `method.privileged_sighted_teacher` the reference does reach the prompt: the check can fail.
"""

from __future__ import annotations

import json

import pytest

from selfplay_core.config import load_config
from selfplay_core.problems import Problem, TestCase

SIGHTED = "method.privileged_sighted_teacher=true"


class CapturingEngine:
    """A real engine; every prompt it is given is recorded, in order, with the number of
    completions it had written before it."""

    def __init__(self, inner):
        self.inner = inner
        self.prompts: list[tuple[str, int]] = []
        self.outputs: list[str] = []

    def generate(self, prompts, n, sampling):
        self.prompts += [(p, len(self.outputs)) for p in prompts]
        groups = self.inner.generate(prompts, n, sampling)
        self.outputs += [c.text for g in groups for c in g]
        return groups

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _show_test(g: Problem, t: TestCase) -> list[str]:
    """How the code base renders a test in text (STaR's hint, the problem JSON)."""
    out = [json.dumps(t.to_json())]
    if t.stdin is not None:
        out.append(f"input:\n{t.stdin.rstrip()}\noutput:\n{str(t.expected).rstrip()}")
    else:
        name = (g.entry_point or "f").split(".")[-1]
        out.append(f"{name}({', '.join(repr(a) for a in t.args or [])}) == {t.expected!r}")
    return out


def secrets(g: Problem, hidden_from: int = 0) -> list[str]:
    """The texts of a goalpost a prompt must not hold: its reference program and its body (the
    lines after the header: the student prompt shows the header as the task's signature), its
    tests from `hidden_from` on (the ones its statement does not show), its task key."""
    meta = g.metadata or {}
    out = []
    ref = (meta.get("reference") or "").strip()
    if ref:
        out.append(ref)
        body = ref.partition("\n")[2].strip()
        if body:
            out.append(body)
    for t in g.tests[hidden_from:]:
        out += _show_test(g, t)
    if meta.get("key"):
        out.append(meta["key"])
    return out


def leaks(engines: list[CapturingEngine], goalposts: list[Problem], hidden_from: int = 0) -> list[tuple[str, str]]:
    """(goalpost id, the secret) for each secret found in a prompt that no earlier completion
    of the same engine contained."""
    found = []
    for eng in engines:
        for prompt, written in eng.prompts:
            for g in goalposts:
                for s in secrets(g, hidden_from):
                    if s in prompt and not any(s in o for o in eng.outputs[:written]):
                        found.append((g.id, s))
    return found


def toy_config(tmp, config: str, *sets: str):
    from selfplay_core.toyworld.bootstrap import ASSET_DIR
    from tests.support.toy_models import depth3_goalposts_file

    gp, _ = depth3_goalposts_file(tmp, 4)
    return load_config(config, [
        f"model.path={ASSET_DIR}", f"out_dir={tmp / 'runs'}", f"world.goalposts={gp}",
        "world.max_goalposts=null", "iterations=1", "student.samples_per_task=4",
        "student.batch_size=32", "student.fill=none", "engine.max_new_tokens_teacher=160",
        "engine.max_new_tokens_student=64", "eval.verdict=false", *sets])


def run_one_iteration(tmp, executor, config: str, *sets: str, rounds_only: bool = False):
    """One iteration (or, with `rounds_only`, the first round's proposals) of the config's method
    with its engines captured. Returns (engines, the run's goalposts, the proposals' anchors)."""
    from selfplay_core.loop.context import build_context
    from selfplay_core.loop.driver import direct
    from selfplay_core.methods import method_for
    from selfplay_core.records import IterationLog

    cfg = toy_config(tmp, config, *sets)
    ctx = build_context(cfg, tmp / "run", executor=executor)
    try:
        ctx.engine = CapturingEngine(ctx.engine)
        engines = [ctx.engine]
        method = method_for(cfg.method)
        method.setup(ctx)
        guide = getattr(method, "guide", None)
        if guide is not None:
            guide.engine = CapturingEngine(guide.engine)
            engines.append(guide.engine)
        if rounds_only:
            props = next(iter(method.rounds(ctx, []))).propose(ctx)
        else:
            method.run_iteration(ctx, IterationLog(), direct)
            props = None
        return engines, list(ctx.goalposts_by_id().values()), props
    finally:
        ctx.close()


TOY_RUNS = {
    "gasp": ("configs/tiny-cpu.yaml", "method.goalposts_per_iteration=4", "method.proposals_per_anchor=2"),
    "gasp+rlvr": ("configs/gasp-rlvr-tiny-cpu.yaml", "method.goalposts_per_iteration=4",
                  "method.proposals_per_anchor=2", "student.real_tasks_per_iteration=4"),
    "sgs": ("configs/sgs-tiny-cpu.yaml", "method.targets_per_iteration=4", "method.proposals_per_target=2"),
    "compassplay": ("configs/compassplay-tiny-cpu.yaml", "method.reference=goalposts",
                    "method.reference_tasks=4", "method.proposals_per_iteration=4"),
}


@pytest.mark.parametrize("name", list(TOY_RUNS))
def test_no_goalpost_solution_or_test_reaches_any_prompt_of_an_iteration(name, tmp_path, executor):
    config, *sets = TOY_RUNS[name]
    engines, goalposts, _ = run_one_iteration(tmp_path, executor, config, *sets)
    teacher_prompts = [p for p, _ in engines[0].prompts if p.startswith("### Task")]
    assert engines[0].prompts and teacher_prompts, "the iteration sent the engine no prompt"
    # the run's goalposts have what the check looks for (a check of nothing would pass)
    assert goalposts and all(secrets(g) for g in goalposts)
    assert all(g.metadata["reference"].strip() for g in goalposts)
    assert leaks(engines, goalposts) == []


def test_the_privileged_ablation_shows_the_reference_so_the_check_can_fail(tmp_path, executor):
    engines, goalposts, props = run_one_iteration(tmp_path, executor, "configs/gasp-sighted-tiny-cpu.yaml",
                                                  "method.goalposts_per_iteration=4", rounds_only=True)
    refs = {g.id: g.metadata["reference"].rstrip() for g in goalposts}
    assert props and all(refs[p.anchor.goalpost_id] in p.prompt for p in props)
    assert {g for g, _ in leaks(engines, goalposts)} == {p.anchor.goalpost_id for p in props}


def test_the_blind_lemma_prompt_is_the_question_and_an_empty_solution_section(tmp_path, executor):
    """What the teacher now receives for a goalpost, spelled out: its question, an empty
    solution section (as on real data), the variant request."""
    from selfplay_core.roles.teacher import SOLUTION_HEADER, TASK_HEADER, VARIANT_HEADER

    engines, goalposts, props = run_one_iteration(tmp_path, executor, "configs/tiny-cpu.yaml",
                                                  "method.goalposts_per_iteration=4", rounds_only=True)
    by_id = {g.id: g for g in goalposts}
    for p in props:
        q = by_id[p.anchor.goalpost_id].prompt.strip()
        assert p.prompt == (f"{TASK_HEADER}\n{q}\n{SOLUTION_HEADER}\n\n"
                            f"{VARIANT_HEADER} easier, axis {p.axis}\n")


def test_a_judge_that_reads_the_reference_needs_the_privileged_flag():
    for judge in ("method.judge={name: code, power: 4}", "method.judge={name: gradient, gate: 0.0}",
                  "method=gasp-edit"):
        with pytest.raises(Exception, match=r"privileged_sighted_teacher=true") as e:
            load_config(None, [judge])
        assert "reference program" in str(e.value)
        assert load_config(None, [judge, SIGHTED]).method.privileged_sighted_teacher


def test_a_privileged_run_is_tagged_and_says_so_in_its_summary():
    from selfplay_cli.run import PRIVILEGED_NOTE
    from selfplay_core.goalpost_view import privileged_tags

    assert privileged_tags(load_config(None).method) == {}
    assert privileged_tags(load_config("configs/gasp-sighted-tiny-cpu.yaml").method) == {"privileged": "true"}
    assert privileged_tags(load_config("configs/sgs-tiny-cpu.yaml", [SIGHTED]).method) == {"privileged": "true"}
    assert privileged_tags(load_config("configs/rlvr-tiny-cpu.yaml").method) == {}   # no teacher at all
    assert "privileged=true" in PRIVILEGED_NOTE and "reference program" in PRIVILEGED_NOTE


# ---- the real-data world's prompt form -------------------------------------------------------

def lcb_goalposts(k: int) -> list[Problem]:
    """k real LiveCodeBench problems from before the window, as a world with solutions and
    hidden tests would hold them: a reference program in metadata and one private test after
    the public ones (the shared mirror carries the public tests only, which the statement shows)."""
    import dataclasses

    from selfplay_core.datasets.livecodebench import load_lcb

    out = []
    for i, p in enumerate(load_lcb(None, window="train").problems[:k]):
        hidden = TestCase(stdin=f"{7_700_001 + i}\n", expected=f"{9_900_001 + i}\n")
        ref = f"import sys\nn = int(sys.stdin.readline())\nprint(n + 2200000 + {i})  # parity-{i}\n"
        out.append(dataclasses.replace(p, tests=list(p.tests) + [hidden],
                                       metadata={**p.metadata, "reference": ref}))
    return out


@pytest.mark.parametrize("sighted", [False, True], ids=["blind", "privileged"])
def test_the_real_data_lemma_prompt_holds_the_question_only(sighted, long_context_micro, tmp_path, executor):
    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.methods import method_for
    from selfplay_core.run_context import RunContext

    goalposts = lcb_goalposts(2)
    cfg = load_config(None, [
        f"model.path={long_context_micro}", f"out_dir={tmp_path}", "method=gasp+rlvr", "world.name=lcb",
        "method.goalposts_per_iteration=2", "method.proposals_per_anchor=1",
        "student.real_tasks_per_iteration=1", "engine.max_new_tokens_teacher=16",
        *([SIGHTED] if sighted else [])])
    engine = CapturingEngine(HFEngine(str(long_context_micro), batch_size=4))
    ctx = RunContext(cfg, tmp_path, engine=engine, executor=executor, goalposts=goalposts)
    method = method_for(cfg.method)
    props = next(iter(method.rounds(ctx, []))).propose(ctx)
    assert len(props) == 2 and len(engine.prompts) == 2
    n_public = [g.metadata["n_public"] for g in goalposts]
    for g, shown in zip(goalposts, n_public):
        prompt = next(p.prompt for p in props if p.anchor.goalpost_id == g.id)
        assert g.prompt.strip() in prompt                 # the question, with the examples it shows
        assert g.tests[-1].stdin not in prompt and g.tests[-1].expected not in prompt
        assert (g.metadata["reference"].rstrip() in prompt) is sighted
    found = leaks([engine], goalposts, hidden_from=min(n_public))
    assert bool(found) is sighted
    if sighted:
        assert {s for _, s in found} <= {s for g in goalposts for s in secrets(g)[:2]}
