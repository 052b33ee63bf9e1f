"""lab/constrained_lemmas.py: its two constraints hold on what it samples (checked here
by an independent subsequence test and token-set test on the committed checkpoint), its table
counts every proposal once, its log-probabilities are the model's own loss, and a goalpost file of another world is one clear error."""

import ast
import importlib.util
import json
import re

from lab.tests.run_script import LAB, run_lab_script


def _bench():
    spec = importlib.util.spec_from_file_location("constrained_lemmas", LAB / "constrained_lemmas.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _shipped_sources(n):
    from selfplay_core.toyworld.bootstrap import ASSET_DIR
    from selfplay_core.toyworld.splits import build_world

    ids = json.loads((ASSET_DIR / "goalposts.json").read_text())["ids"][:n]
    pool = build_world(0).goalpost_pool
    tasks = dict(zip([p.id for p in pool.problems], pool.tasks))
    return ASSET_DIR, [tasks[g] for g in ids]


def test_sampled_sections_obey_each_constraint():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfplay_core.roles.teacher import INPUTS_HEADER, teacher_completion, teacher_prompt

    bench = _bench()
    model_dir, sources = _shipped_sources(4)
    sources = [s for s in sources for _ in range(3)]
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    prompts = [teacher_prompt(s.description(), s.program(), "f", "easier") for s in sources]
    enc = lambda text: tok(text, add_special_tokens=False)["input_ids"]
    fmt = set(enc(teacher_completion("a", "def f(x):\n    return x\n", [1]))) | set(enc(f"\n{INPUTS_HEADER}\n"))
    fmt.add(tok.eos_token_id)

    # subsequence: greedy matching of the sampled ids against the goalpost's own sections either
    # matches every sampled id, or used up the whole target (where the constraint ends)
    fn = bench.make_constraint("subsequence", tok, model.config.vocab_size, prompts, sources)
    outs = bench.constrained_sample(model, tok, prompts, fn, temperature=1.0, max_new_tokens=160, seed=1)
    assert len(outs) == len(sources)
    left_early = 0
    for src, ids in zip(sources, outs):
        full = teacher_completion(src.description(), src.program(), [])
        target = enc(full.split(INPUTS_HEADER)[0] + INPUTS_HEADER)
        j = matched = 0
        for v in ids:
            while j < len(target) and target[j] != v:
                j += 1
            if j == len(target):
                break
            j, matched = j + 1, matched + 1
        assert matched == len(ids) or j == len(target), (tok.decode(ids), tok.decode(target))
        left_early += matched < len(ids)
    assert left_early > 0   # some samples reached their inputs, which are unconstrained

    # copy: every id sampled before the Inputs header is the prompt's or the format's
    fn = bench.make_constraint("copy", tok, model.config.vocab_size, prompts, sources)
    outs = bench.constrained_sample(model, tok, prompts, fn, temperature=1.0, max_new_tokens=160, seed=1)
    for prompt, ids in zip(prompts, outs):
        allowed = set(enc(prompt)) | fmt
        for i, v in enumerate(ids):
            if INPUTS_HEADER in tok.decode(ids[:i]):
                break
            assert v in allowed, (i, tok.decode([v]), tok.decode(ids))


def test_the_table_counts_every_proposal_once():
    model_dir, _ = _shipped_sources(0)
    ids = json.loads((model_dir / "goalposts.json").read_text())["ids"]
    r = run_lab_script("constrained_lemmas.py", model_dir, model_dir / "goalposts.json", "--proposals", 2, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    n = 2 * len(ids)
    for mode in ("free", "copy", "subsequence"):
        m = re.search(rf"^\| {mode} \| (\d+)/{n} \| (\d+) \| (\d+) \| (\d+) \| (\d+)/{len(ids)} \| (\{{.*?\}}) \| (\{{.*?\}}) \|$",
                      r.stdout, re.M)
        assert m, r.stdout
        parsed, valid, faithful, true, covered = map(int, m.groups()[:5])
        assert true <= faithful <= valid <= parsed <= n and covered <= min(true, len(ids))
        drops, one_step_wrong = ast.literal_eval(m.group(6)), ast.literal_eval(m.group(7))
        assert sum(drops.values()) <= parsed and sum(one_step_wrong.values()) <= drops.get(1, 0)
    # the likelihood table: one row per group of sources; a true lemma above the best of a
    # source's own proposals is above their median too
    for name in (rf"its {len(ids)} goalposts", rf"\d+ other depth-\d pool tasks"):
        m = re.search(rf"^\| {name} \| (\d+) \| (-?[\d.]+) \| (-?[\d.]+) \| (-?[\d.]+) \| (\d+)/(\d+) \| (\d+)/(\d+) \|$",
                      r.stdout, re.M)
        assert m, r.stdout
        both, true_lp, median_lp, best_lp = int(m.group(1)), *map(float, m.groups()[1:4])
        above_median, above_best = int(m.group(5)), int(m.group(7))
        assert int(m.group(6)) == int(m.group(8)) == both <= len(ids)
        assert above_best <= above_median <= both and median_lp <= best_lp and true_lp < 0


def test_sections_logprob_is_the_models_own_loss_on_those_tokens():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfplay_core.roles.teacher import INPUTS_HEADER, teacher_completion, teacher_prompt

    bench = _bench()
    model_dir, (src,) = _shipped_sources(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    prompt = teacher_prompt(src.description(), src.program(), "f", "easier")
    got = bench.sections_logprob(model, tok, prompt, src.description(), src.program())
    # independently: transformers' shifted cross-entropy with the prompt's labels masked out
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    c = tok(teacher_completion(src.description(), src.program(), []).split(INPUTS_HEADER)[0],
            add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        loss = model(torch.tensor([p + c]), labels=torch.tensor([[-100] * len(p) + c])).loss.item()
    assert abs(got - (-loss * len(c))) < 1e-3 * len(c)


def test_goalposts_of_another_world_are_one_clear_error(tmp_path):
    model_dir, _ = _shipped_sources(0)
    path = tmp_path / "goalposts.json"
    path.write_text(json.dumps(["toy/goalpost_pool/d5/9999"]))
    r = run_lab_script("constrained_lemmas.py", model_dir, path, timeout=300)
    assert r.returncode == 2 and "not in this world's goalpost pool" in r.stderr and "Traceback" not in r.stderr
    path.write_text(json.dumps({"ids": 3}))
    r = run_lab_script("constrained_lemmas.py", model_dir, path, timeout=300)
    assert r.returncode == 2 and "expected a list of goalpost ids" in r.stderr
    r = run_lab_script("constrained_lemmas.py", model_dir, model_dir / "goalposts.json", "--modes", "greedy", timeout=300)
    assert r.returncode == 2 and "--modes" in r.stderr
