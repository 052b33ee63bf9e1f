"""The method slot: the registry, the per-method config union, the order in which the base
class runs a method's hooks, and no method-name branches in shared code."""

import ast
from pathlib import Path
from typing import Literal

import pytest

from selfplay_core.config import RunConfig, load_config
from selfplay_core.methods import Method, MethodConfig, Round, method_for, register, registered
from selfplay_core.methods.azr import AZR, AZRConfig
from selfplay_core.methods.gasp import GASP, GASPConfig, GASPPlusRLVR, GASPRLVRConfig
from selfplay_core.methods.compassplay import CompassConfig, CompassPlay
from selfplay_core.methods.edited_lemmas import GASPEdit, GASPEditConfig
from selfplay_core.methods.rlvr import RLVR, RLVRConfig
from selfplay_core.methods.rzero import RZero, RZeroConfig
from selfplay_core.methods.spice import SPICE, SpiceConfig
from selfplay_core.methods.sgs import SGS, SGSConfig
from selfplay_core.methods.star import STaR, STaRConfig
from selfplay_core.records import IterationLog
from selfplay_core.run_context import RunContext

ROOT = Path(__file__).resolve().parents[2]


def test_the_registry_lists_every_method():
    # The last two are the toy world's (registered by its plug-in, which needs its oracle).
    from selfplay_core.toyworld.arms import (OracleCurriculum, OracleCurriculumConfig, OracleFilter,
                                             OracleFilterConfig)

    assert registered() == {"azr": AZR, "compassplay": CompassPlay, "gasp": GASP,
                            "gasp+rlvr": GASPPlusRLVR, "gasp-edit": GASPEdit, "rlvr": RLVR, "r-zero": RZero, "sgs": SGS,
                            "spice": SPICE, "star": STaR, "oracle-curriculum": OracleCurriculum,
                            "oracle-filter": OracleFilter}
    for name, cls in registered().items():
        assert cls.name == name and cls.Config.model_fields["name"].default == name
    assert {GASPConfig, GASPRLVRConfig, GASPEditConfig, AZRConfig, RLVRConfig, CompassConfig, SpiceConfig,
            RZeroConfig, SGSConfig, STaRConfig, OracleCurriculumConfig,
            OracleFilterConfig} == {c.Config for c in registered().values()}


@pytest.mark.parametrize("name,cls", [("gasp", GASP), ("azr", AZR), ("rlvr", RLVR), ("gasp+rlvr", GASPPlusRLVR),
                                      ("r-zero", RZero), ("sgs", SGS), ("star", STaR)])
def test_the_config_section_selects_the_method(name, cls):
    cfg = load_config(None, [f"method={name}", "student.real_tasks_per_iteration=4"])
    assert isinstance(cfg.method, cls.Config) and type(method_for(cfg.method)) is cls


def test_a_method_needs_its_own_config():
    with pytest.raises(TypeError, match="needs a AZRConfig"):
        AZR(GASPConfig())
    with pytest.raises(ValueError, match="unknown method"):
        method_for(MethodConfig(name="nope"))


def test_register_refuses_a_method_without_a_named_config_and_a_second_one_of_a_name():
    class NoName(Method):
        pass
    with pytest.raises(TypeError, match="Config must be a MethodConfig subclass"):
        register(NoName)

    class Twin(Method):
        Config = GASPConfig
    with pytest.raises(ValueError, match="registered twice"):
        register(Twin)
    assert registered()["gasp"] is GASP


class EchoConfig(MethodConfig):
    name: Literal["echo-test"] = "echo-test"


class EchoRound(Round):
    """A round that proposes nothing: enough to see which stages run, in which order."""

    def __init__(self, kind, seen):
        self.kind, self.seen = kind, seen

    def propose(self, ctx):
        return []

    def validate(self, ctx, props, log):
        pass

    def estimate(self, ctx, props, log):
        pass

    def score(self, ctx, props, log):
        log.add(**{f"teacher/{self.kind}/scored": 1})


class Echo(Method):
    Config = EchoConfig

    def __init__(self, config, seen):
        super().__init__(config)
        self.seen = seen

    def rounds(self, ctx, done):
        for kind in ("first", "second"):
            yield EchoRound(kind, self.seen)


def test_the_base_class_runs_the_hooks_as_stages_in_order():
    """A method written as one small class: rounds in order, each as propose / validate /
    estimate / score stages, then the student batch (solve_real), its fill to the fixed batch
    size (student.fill, default replay) and the update."""
    seen = []
    method = Echo(EchoConfig(), seen)
    ctx = RunContext(load_config(None))
    log = IterationLog()

    def call(name, fn, *args):
        seen.append(name)
        return fn(*args)

    props, student = method.run_iteration(ctx, log, call)
    assert seen == ["propose_first", "validate_first", "estimate_first", "score_first",
                      "propose_second", "validate_second", "estimate_second", "score_second",
                      "solve_real", "fill_student", "update"]
    assert props == [] and student == []
    # No proposal and no replay buffer yet: the fill has nothing to add.
    assert log.metrics == {"teacher/first/scored": 1, "teacher/second/scored": 1,
                           "student/batch/own_tasks": 0, "student/fill/tasks": 0}


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings}


SHARED = (["selfplay_core/stages.py", "selfplay_core/run_context.py", "selfplay_core/solve.py",
           "selfplay_core/methods/base.py", "selfplay_core/methods/rounds.py",
           "tasks/stages.py", "flows/selfplay.py"]
          + [str(p.relative_to(ROOT)) for p in (ROOT / "selfplay_core/loop").glob("*.py")])


@pytest.mark.parametrize("path", SHARED)
def test_shared_code_never_names_a_method(path):
    """No `if method == "azr"` (or a dict keyed by method names) outside the methods' own files."""
    names = set(registered()) | {"gasp+rlvr"}
    assert not (_string_constants(ROOT / path) & names), path


@pytest.mark.parametrize("path", ["selfplay_core/stages.py", "selfplay_core/methods/base.py",
                                  "selfplay_core/methods/rounds.py", "selfplay_core/methods/gasp.py",
                                  "selfplay_core/methods/judges/base.py", "selfplay_core/methods/judges/__init__.py"])
def test_the_code_that_applies_a_judge_never_names_one(path):
    """GASP's judge is one slot applied in one place (judges.base.JudgedRound): no `if judge ==
    "guide"` there, in GASP, its rounds or the shared stages (GASP's table of old keys holds old
    key names, not judges')."""
    from selfplay_core.methods.judges import JUDGE_CONFIGS

    names = {c.model_fields["name"].default for c in JUDGE_CONFIGS}
    tree = ast.parse((ROOT / path).read_text())
    table = [n.value for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)
             and isinstance(n.target, ast.Name) and n.target.id == "moved_keys"]
    in_table = {id(c) for t in table for c in ast.walk(t)}
    constants = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                 and isinstance(n.value, str) and id(n) not in in_table}
    assert not (constants & names), path


def test_the_run_config_has_no_section_per_method():
    assert "azr" not in RunConfig.model_fields and "advantage" not in RunConfig.model_fields
    import selfplay_core.methods as M
    assert not hasattr(M, "METHODS") and not hasattr(M, "get_method")
