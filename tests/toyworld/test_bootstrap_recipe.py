"""`selfplay bootstrap --config configs/toy/<recipe>.yaml` (issue 50): the toy start checkpoint
from one product command, deterministic. The short recipe, built twice through the CLI, gives
bit-identical weights, and bootstrap.json records their sha256 and the recipe's."""

import hashlib
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SHORT = ROOT / "configs" / "toy" / "short.yaml"


def _build(out: Path, recipe: Path = SHORT) -> dict:
    from selfplay_cli.main import main

    assert main(["bootstrap", "--no-prefect", "--config", str(recipe), "--out", str(out)]) == 0
    return json.loads((out / "bootstrap.json").read_text())


def _tensor_sha256(folder: Path) -> str:
    """The weights' hash recomputed here from the saved file, in the documented order (name,
    dtype, shape, bytes per tensor, names sorted)."""
    from safetensors.torch import load_file

    h = hashlib.sha256()
    for name, t in sorted(load_file(folder / "model.safetensors").items()):
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def test_the_short_recipe_twice_gives_identical_weights(tmp_path):
    from safetensors.torch import load_file

    a, b = _build(tmp_path / "a"), _build(tmp_path / "b")
    assert a["weights_sha256"] == b["weights_sha256"]
    wa, wb = (load_file(tmp_path / n / "model.safetensors") for n in ("a", "b"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    # the recorded hash is the hash of what was saved (an index can be tied, the lists can't)
    saved = [_tensor_sha256(tmp_path / n) for n in ("a", "b")]
    assert a["weights_sha256"] == saved[0] == saved[1]
    assert a["recipe"] == {"file": "short.yaml", "sha256": hashlib.sha256(SHORT.read_bytes()).hexdigest()}
    # the recipe's settings are what was built: its teacher phase ran
    assert a["config"]["n_examples"] == 600 and a["teacher_phase"]["steps"] == 10
    assert not torch.are_deterministic_algorithms_enabled()  # the process's setting is restored


def test_another_seed_gives_other_weights(tmp_path):
    import yaml

    recipe = yaml.safe_load(SHORT.read_text())
    recipe["model"]["seed"] = 1
    other = tmp_path / "seed1.yaml"
    other.write_text(yaml.safe_dump(recipe))
    assert _build(tmp_path / "s1", other)["weights_sha256"] != _build(tmp_path / "s0")["weights_sha256"]


def test_the_shipped_recipe_is_the_committed_checkpoints_config():
    from selfplay_core.toyworld.bootstrap import ASSET_DIR, load_recipe

    recipe, _ = load_recipe(ROOT / "configs" / "toy" / "tiny-s0.yaml")
    meta = json.loads((ASSET_DIR / "bootstrap.json").read_text())
    assert recipe.model.key() == meta["config_key"] and recipe.goalposts


@pytest.mark.parametrize("argv, message", [
    (["--config", str(SHORT), "--seed", "3"], "drop --seed"),
    (["--config", str(SHORT), "--goalposts"], "drop --goalposts"),
    (["--config", "configs/toy/nope.yaml"], "no such file"),
])
def test_bad_recipe_arguments_are_one_clear_error(argv, message, capsys, tmp_path):
    from selfplay_cli.main import main

    assert main(["bootstrap", "--no-prefect", *argv, "--out", str(tmp_path / "m")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_an_unknown_recipe_key_names_the_key(tmp_path, capsys):
    from selfplay_cli.main import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {seed: 0, layers: 3}\n")
    assert main(["bootstrap", "--no-prefect", "--config", str(bad), "--out", str(tmp_path / "m")]) == 2
    assert "model.layers" in capsys.readouterr().err
