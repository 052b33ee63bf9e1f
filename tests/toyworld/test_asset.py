"""The committed checkpoint (selfplay_core/toyworld/assets/tiny-s0) is what the bootstrap flow
produces: the same config, and a fresh bootstrap reaches the same quality."""

import json

import pytest

from selfplay_core.toyworld.bootstrap import ASSET_DIR, BootstrapConfig, is_complete

pytestmark = pytest.mark.skipif(not is_complete(ASSET_DIR), reason="no committed checkpoint")


def test_asset_is_a_default_bootstrap_and_loads():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    meta = json.loads((ASSET_DIR / "bootstrap.json").read_text())
    assert meta["config_key"] == BootstrapConfig().key()
    model = AutoModelForCausalLM.from_pretrained(ASSET_DIR)
    tok = AutoTokenizer.from_pretrained(ASSET_DIR)
    assert model.config.vocab_size == len(tok) == meta["vocab_size"]
    size = sum(p.stat().st_size for p in ASSET_DIR.iterdir())
    assert size <= 5 * 1024 * 1024


def _pass1(model_dir, world, executor):
    from selfplay_core.engines.base import SamplingParams
    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.solve import solve
    from selfplay_core.toyworld.diagnostics import pass_by_depth

    engine = HFEngine(model_dir, batch_size=128)
    probs = world.eval.by_depth()[1] + world.eval.by_depth()[2]
    res = solve(engine, executor, probs, 8, SamplingParams(temperature=1.0, max_new_tokens=128, seed=3))
    return {d: row["pass@1"] for d, row in pass_by_depth(res, ks=(1,)).items()}


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a full bootstrap: ~5 min idle, 13 min on a loaded 2-core box
def test_fresh_bootstrap_reproduces_the_asset_quality(tmp_path, world, executor):
    from selfplay_core.toyworld.bootstrap import bootstrap_toy_model

    fresh = bootstrap_toy_model(BootstrapConfig(), out_dir=tmp_path / "fresh", progress=False,
                                log=lambda m: None)
    meta = [json.loads((d / "bootstrap.json").read_text()) for d in (ASSET_DIR, fresh)]
    assert meta[0]["corpus"] == meta[1]["corpus"]  # the same training data, token for token
    want, got = _pass1(ASSET_DIR, world, executor), _pass1(fresh, world, executor)
    # 80 / 100 tasks x 8 samples: sampling noise alone is ~0.02-0.03.
    for d in (1, 2):
        assert abs(got[d] - want[d]) < 0.1, (d, got, want)
