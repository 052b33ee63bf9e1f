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
