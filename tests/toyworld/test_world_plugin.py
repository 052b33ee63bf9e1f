"""The toy world as a world plug-in: registered through the plug-in list, its config section
chosen by `world.name`, one oracle object for every diagnostic, its default model and documents,
and the oracle arms as methods it registers (the older `diagnostics.*` keys select them)."""

from __future__ import annotations

import random
from typing import Literal

import pytest

from selfplay_core.config import ConfigError, load_config
from selfplay_core.methods import method_for
from selfplay_core.methods.gasp import GASPConfig
from selfplay_core.problems import Problem, TestCase
from selfplay_core.worlds import World, WorldConfig, register, registered, world_class


def test_the_plugin_list_registers_the_toy_world_beside_the_real_data_world():
    from selfplay_core.toyworld.world import ToyWorld
    from selfplay_core.worlds.lcb import RealWorld

    assert registered() == {"lcb": RealWorld, "toy": ToyWorld}
    assert load_config(None, []).world.name == "toy"          # the embedded default
    with pytest.raises(ValueError, match="unknown world 'moon'; one of \\['lcb', 'toy'\\]"):
        world_class("moon")


def test_a_world_name_is_registered_once_and_needs_its_own_config():
    class Toy2Config(WorldConfig):
        name: Literal["toy"] = "toy"

    class Toy2(World):
        Config = Toy2Config

    with pytest.raises(ValueError, match="world 'toy' is registered twice"):
        register(Toy2)

    class Nameless(World):
        pass

    with pytest.raises(TypeError, match="must be a WorldConfig subclass"):
        register(Nameless)
    assert "toy" in registered() and registered()["toy"] is not Toy2


def test_world_keys_live_in_their_world_section():
    lcb = load_config(None, ["world.name=lcb", "world.eval_sets=[lcb, humaneval+]"])
    assert lcb.world.eval_sets == ("lcb", "humanevalplus") and not hasattr(lcb.world, "deep_pool")
    toy = load_config(None, ["world.deep_pool=24"])
    assert toy.world.deep_pool == 24 and not hasattr(toy.world, "eval_sets")
    assert load_config(None, ["world=lcb"]).world.rule == "unsolved"    # `world: NAME` shorthand
    assert toy.world.rule == "frontier"                                   # the toy world's default
    with pytest.raises(ConfigError, match="world.frontier_band: unknown key \\(a key of world 'toy'"):
        load_config(None, ["world.name=lcb", "world.frontier_band=[0.2, 0.8]"])
    with pytest.raises(ConfigError, match="world: unknown world 'moon'; one of lcb, toy"):
        load_config(None, ["world.name=moon"])


def test_the_toy_oracle_knows_the_truth_of_toy_tasks(world, executor):
    from selfplay_core.toyworld.oracle import easier_variants, task_of
    from selfplay_core.toyworld.world import ToyOracle

    oracle = ToyOracle()
    problem = next(p for p in world.eval.problems if p.metadata["depth"] == 3)
    other = next(p for p in world.eval.problems if p.metadata["depth"] == 2)
    task, wrong = task_of(problem), task_of(other)
    inputs = [[x] for x in task.sample_inputs(random.Random(0), 5)]

    right, swapped = oracle.fidelity(executor, [(task.description(), task.program(), inputs),
                                                (task.description(), wrong.program(), inputs)])
    assert right.faithful and not swapped.faithful

    # The truth of a question is what the task's own program returns on those inputs.
    run_on = Problem(id="x", kind="call", entry_point="f",
                     tests=[TestCase(args=a, has_expected=False) for a in inputs])
    ran = executor.run([(run_on, task.program())])[0]
    assert oracle.truth(executor, [(task.description(), inputs), ("Sort a list.", inputs)]) == \
        [list(ran.outputs), None]

    _, easier = easier_variants(task)[0]
    assert oracle.variant(task.description(), easier.description(), "easier") is True
    assert oracle.variant(task.description(), task.description(), "easier") is False
    assert oracle.variant("A page about sorting.", easier.description(), "easier") is None


def test_the_toy_world_offers_its_model_and_documents_the_real_data_world_none():
    from selfplay_core.datasets.documents import Document

    toy, lcb = world_class("toy"), world_class("lcb")
    assert (toy.default_model() / "config.json").is_file()
    docs = toy.documents()
    assert docs and all(isinstance(d, Document) for d in docs)
    with pytest.raises(FileNotFoundError, match="world 'lcb' has no default model"):
        lcb.default_model()
    assert lcb.documents() is None


@pytest.mark.parametrize("key, name, cls", [("oracle_curriculum", "oracle-curriculum", "OracleCurriculum"),
                                            ("oracle_filter", "oracle-filter", "OracleFilter")])
def test_the_diagnostics_keys_select_the_oracle_arms_with_gasps_keys(key, name, cls):
    cfg = load_config(None, [f"diagnostics.{key}=true", "method.lemma_band=[0.2, 0.8]"])
    assert cfg.method.name == name and isinstance(cfg.method, GASPConfig)
    assert cfg.method.lemma_band == (0.2, 0.8)
    assert cfg.method.model_dump(exclude={"name", "lemma_band"}) == \
        GASPConfig().model_dump(exclude={"name", "lemma_band"})
    assert type(method_for(cfg.method)).__name__ == cls
    assert load_config(None, [f"method.name={name}"]).method == cfg.method.model_copy(
        update={"lemma_band": GASPConfig().lemma_band})


@pytest.mark.parametrize("sets, words", [
    (["diagnostics.oracle_curriculum=true", "diagnostics.oracle_filter=true"], "not both"),
    (["method=azr", "diagnostics.oracle_filter=true"], "oracle arms of method gasp"),
    (["world.name=lcb", "diagnostics.oracle_filter=true"], "needs the toy world's oracle"),
    (["diagnostics.oracle_teacher=true"], "diagnostics.oracle_teacher: unknown key"),
])
def test_the_oracle_arms_refuse_what_they_cannot_do(sets, words):
    with pytest.raises(ConfigError, match=words):
        load_config(None, sets)


def test_a_config_that_names_no_arm_is_unchanged():
    assert load_config(None, ["diagnostics.oracle_filter=false"]) == load_config(None, [])


def test_the_run_form_offers_each_world_as_a_form_named_by_it():
    from prefect.utilities.callables import parameter_schema

    from flows.selfplay import selfplay

    defs = parameter_schema(selfplay.fn).model_dump()["definitions"]
    world = defs["RunConfig"]["properties"]["world"]
    refs = [c["$ref"].rsplit("/", 1)[1] for c in world["anyOf"]]
    assert sorted(defs[r]["title"] for r in refs) == ["lcb", "toy"] and world["description"]
    assert "deep_pool" in defs[refs[[defs[r]["title"] for r in refs].index("toy")]]["properties"]
