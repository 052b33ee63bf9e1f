"""The schema Prefect draws the run form from: every section a form, the method a choice of
forms labelled by method name (the UI shows a raw JSON editor for `oneOf`)."""

from __future__ import annotations

import json

from prefect.utilities.callables import parameter_schema

from flows.selfplay import selfplay
from selfplay_core.config import RunConfig
from selfplay_core.methods import registered


def test_the_method_is_a_choice_of_forms_named_by_method():
    schema = parameter_schema(selfplay.fn).model_dump()
    defs = schema["definitions"]
    method = defs["RunConfig"]["properties"]["method"]
    assert "oneOf" not in json.dumps(schema)
    refs = [c["$ref"].rsplit("/", 1)[1] for c in method["anyOf"]]
    assert sorted(defs[r]["title"] for r in refs) == sorted(registered())
    assert method["description"]


def test_a_form_choice_still_validates_as_its_method():
    cfg = RunConfig.model_validate({"method": {"name": "azr"}})
    assert type(cfg.method).__name__ == "AZRConfig"


def test_every_field_of_the_run_form_says_what_it_is():
    schema = parameter_schema(selfplay.fn).model_dump()
    bare = [f"{name}.{key}" for name, d in schema["definitions"].items()
            for key, field in d.get("properties", {}).items() if not field.get("description")]
    assert bare == []


def test_a_fields_description_is_the_comment_written_beside_it():
    from pydantic import Field

    from selfplay_core.frozen import FrozenConfig

    class Section(FrozenConfig):
        # first line
        # second line
        above: int = 1
        beside: str = "x"   # on the same line
        # a blank line parts a comment from the field below it

        parted: float = 2.0
        explicit: int = Field(3, description="given")  # not this

    class Child(Section):
        above: int = 5

    props = Child.model_json_schema()["properties"]
    assert props["above"]["description"] == "first line second line"
    assert props["beside"]["description"] == "on the same line"
    assert "description" not in props["parted"]
    assert props["explicit"]["description"] == "given"
    assert Child().above == 5
