"""Imported at start-up by every Python whose PYTHONPATH holds this folder (tests of
tools/gpu_check.py and its section processes): makes this interpreter look like the lent
accelerator, which has torch, transformers, accelerate and peft but not pydantic (nor vLLM, TRL,
Prefect, MLflow, datasets). The packages stay installed; the path finder stops seeing them, so
`import pydantic` fails and `importlib.util.find_spec("pydantic")` answers None, exactly as where
they are absent. A folder named by $LENT_MACHINE_ALLOW (a carried copy) is still searched."""

import os
import sys
from importlib.machinery import PathFinder

HIDDEN = {"pydantic", "pydantic_core", "annotated_types", "typing_inspection", "pydantic_settings",
          "pydantic_extra_types", "vllm", "trl", "prefect", "mlflow", "datasets"}


class LentMachinePathFinder(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if path is None and fullname.split(".")[0] in HIDDEN:
            allow = os.environ.get("LENT_MACHINE_ALLOW")
            if allow and allow in sys.path:
                return PathFinder.find_spec(fullname, [allow], target)
            return None
        return PathFinder.find_spec(fullname, path, target)


sys.meta_path[sys.meta_path.index(PathFinder)] = LentMachinePathFinder
