"""Does constrained decoding make the one-model teacher write true lemmas of its own frontier
goalposts? (toy world; the oracle grades, a diagnostic). The teacher writes lemma proposals
(f axis) for each goalpost under one of three decodings:

  free         the loop's sampling
  copy         the Task and Solution sections may use only tokens of the goalpost's question,
               its program and the proposal format; the inputs are free
  subsequence  the Task and Solution sections must be a token subsequence of the goalpost's own
               Task and Solution sections (a lemma written by deletion only); the inputs are free

Per decoding: proposals parsed, valid (the executor's gate), faithful (the question describes
the program), true one-step lemmas, goalposts with at least one; how many steps the parsed
questions drop; and what the one-step drops that are not true lemmas did instead.

Then whether any decoding could find them: the teacher's log-probability of each source's most
likely true one-step lemma (its Task and Solution sections) against that of its own free
proposals, on the goalposts and on as many other pool tasks of the goalposts' depth.

    python lab/constrained_lemmas.py MODEL_DIR GOALPOSTS_JSON [--deep-pool 240]
        [--proposals 8] [--temperature 0.4] [--modes free,copy,subsequence]

GOALPOSTS_JSON: a study folder's `goalposts.json` (ids of the toy world's goalpost pool) or a
mined set (its `ids`). The sampler is the benchmark's own (a batched KV-cache loop with a token
mask), so that the product's engine carries no decoding feature nobody trains with.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODES = ("free", "copy", "subsequence")


def constrained_sample(model, tok, prompts: list[str], allowed_fn, *, temperature: float,
                       max_new_tokens: int, seed: int) -> list[list[int]]:
    """Sample one completion per prompt (its token ids). `allowed_fn(row, generated_ids)`
    returns a boolean vocabulary mask, or None for no constraint."""
    import inspect

    import torch

    from selfplay_core.engines.hf import _cache_of

    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    enc = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    B, width = len(enc), max(len(e) for e in enc)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids = torch.full((B, width), pad, dtype=torch.long)
    mask = torch.zeros((B, width), dtype=torch.long)
    for r, e in enumerate(enc):
        ids[r, width - len(e):] = torch.tensor(e)
        mask[r, width - len(e):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    gen = torch.Generator().manual_seed(seed)
    out_ids: list[list[int]] = [[] for _ in range(B)]
    done = [False] * B
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        cache, logits, nxt = _cache_of(out), out.logits[:, -1, :], pos[:, -1] + 1
        for _ in range(max_new_tokens):
            lg = logits.float() / temperature
            for r in range(B):
                m = None if done[r] else allowed_fn(r, out_ids[r])
                if m is not None:
                    lg[r] = lg[r].masked_fill(~m, float("-inf"))
            t = torch.multinomial(torch.softmax(lg, -1), 1, generator=gen)[:, 0]
            for r, v in enumerate(t.tolist()):
                if not done[r]:
                    out_ids[r].append(v)
                    done[r] = v == tok.eos_token_id
            if all(done):
                break
            mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype)], 1)
            out = model(input_ids=t[:, None], attention_mask=mask, position_ids=nxt[:, None],
                        use_cache=True, **{cache_kw: cache})
            cache, logits, nxt = _cache_of(out), out.logits[:, -1, :], nxt + 1
    return out_ids


def make_constraint(mode: str, tok, vocab: int, prompts: list[str], sources: list):
    """The per-row mask function of a decoding. Both constraints end once the Inputs header
    is written, so test inputs are never restricted."""
    import torch

    from selfplay_core.roles.teacher import INPUTS_HEADER, teacher_completion

    if mode == "free":
        return lambda r, gen: None
    header = tok(f"\n{INPUTS_HEADER}\n", add_special_tokens=False)["input_ids"]
    fmt = set(tok(teacher_completion("a", "def f(x):\n    return x\n", [1]),
                  add_special_tokens=False)["input_ids"]) | set(header) | {tok.eos_token_id}

    def as_mask(ids) -> "torch.Tensor":
        m = torch.zeros(vocab, dtype=torch.bool)
        m[list(ids)] = True
        return m

    if mode == "copy":
        masks = [as_mask(set(tok(p, add_special_tokens=False)["input_ids"]) | fmt) for p in prompts]

        def copy_fn(r, gen):
            return None if INPUTS_HEADER in tok.decode(gen) else masks[r]
        return copy_fn

    targets = []
    for src in sources:
        full = teacher_completion(src.description(), src.program(), [])
        targets.append(tok(full.split(INPUTS_HEADER)[0] + INPUTS_HEADER,
                           add_special_tokens=False)["input_ids"])

    def subsequence_fn(r, gen):
        # Greedy earliest match: the generated prefix is a subsequence of the target iff this
        # pointer stays inside it; what may come next is any token at or after the pointer.
        target, p = targets[r], 0
        for v in gen:
            while p < len(target) and target[p] != v:
                p += 1
            p += 1
            if p >= len(target):
                return None
        return as_mask(set(target[p:]))
    return subsequence_fn


def grade(executor, sources: list, texts: list[str]) -> dict:
    from selfplay_core.roles.common import Rejection
    from selfplay_core.roles.teacher import parse_teacher
    from selfplay_core.toyworld.fidelity import parse_description
    from selfplay_core.toyworld.oracle import easier_variants
    from selfplay_core.toyworld.role_quality import TeacherQuality, _grade

    parsed = [parse_teacher(t) for t in texts]
    lemmas = {src.key: [v for _, v in easier_variants(src)] for src in sources}   # per goalpost
    q = TeacherQuality("lemma", prompts=len(texts))
    rows = _grade(q, executor, parsed, list(range(len(sources))),
                  lambda k, task: task in lemmas[sources[k].key])
    drops, kinds = collections.Counter(), collections.Counter()
    for src, p in zip(sources, parsed):
        task = None if isinstance(p, Rejection) else parse_description(p.question)
        if task is None:
            continue
        drops[src.depth - task.depth] += 1
        if src.depth - task.depth != 1 or task in lemmas[src.key]:
            continue
        have = collections.Counter(name for name, _ in src.steps)
        used = collections.Counter(name for name, _ in task.steps)
        if any(used[n] > have[n] for n in used):
            kinds["a step the goalpost does not have"] += 1
        elif all(s in src.steps for s in task.steps):
            kinds["the goalpost's steps, another order or representation"] += 1
        else:
            kinds["a constant changed"] += 1
    hit = {sources[k].key for k, _, _, true in rows if true}
    return {"prompts": q.prompts, "parsed": q.parsed, "valid": q.valid, "faithful": q.faithful,
            "true": q.true_variant, "goalposts_with_true": len(hit), "drops": dict(sorted(drops.items())),
            "one_step_not_true": dict(kinds)}


def sections_logprob(model, tok, prompt: str, question: str, code: str) -> float:
    """log p(Task and Solution sections | teacher prompt), summed over their tokens."""
    import torch

    from selfplay_core.roles.teacher import INPUTS_HEADER, teacher_completion

    p = tok(prompt, add_special_tokens=False)["input_ids"]
    c = tok(teacher_completion(question, code, []).split(INPUTS_HEADER)[0], add_special_tokens=False)["input_ids"]
    x = torch.tensor([p + c])
    with torch.inference_mode():
        logp = torch.log_softmax(model(x).logits[0, :-1].float(), -1)
    return logp[len(p) - 1:].gather(-1, x[0, len(p):, None])[:, 0].sum().item()


def likelihood_row(model, tok, name: str, tasks: list, samples: int, temperature: float,
                   max_new_tokens: int, seed: int) -> str:
    """Per source: its most likely true one-step lemma against its own free proposals (those
    that parse), in log-probability of the Task and Solution sections."""
    import statistics

    from selfplay_core.roles.common import Rejection
    from selfplay_core.roles.teacher import parse_teacher, teacher_prompt
    from selfplay_core.toyworld.oracle import easier_variants

    prompts = [teacher_prompt(t.description(), t.program(), "f", "easier") for t in tasks]
    outs = constrained_sample(model, tok, [p for p in prompts for _ in range(samples)], lambda r, g: None,
                              temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    rows = []
    for k, (task, prompt) in enumerate(zip(tasks, prompts)):
        trues = [sections_logprob(model, tok, prompt, v.description(), v.program()) for _, v in easier_variants(task)]
        own = [parse_teacher(tok.decode(o, skip_special_tokens=True)) for o in outs[k * samples:(k + 1) * samples]]
        own = [sections_logprob(model, tok, prompt, p.question, p.code) for p in own if not isinstance(p, Rejection)]
        if trues and own:
            rows.append((max(trues), statistics.median(own), max(own)))
    if not rows:
        return f"| {name} | 0 | - | - | - | - | - |"
    mean = lambda i: sum(r[i] for r in rows) / len(rows)
    return (f"| {name} | {len(rows)} | {mean(0):.1f} | {mean(1):.1f} | {mean(2):.1f} "
            f"| {sum(r[0] > r[1] for r in rows)}/{len(rows)} | {sum(r[0] > r[2] for r in rows)}/{len(rows)} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n    python")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("goalposts_json")
    ap.add_argument("--deep-pool", type=int, default=0, help="world.deep_pool of the study")
    ap.add_argument("--world-seed", type=int, default=0, help="world.seed of the study")
    ap.add_argument("--proposals", type=int, default=8, help="lemma proposals per goalpost")
    ap.add_argument("--temperature", type=float, default=0.4, help="the loop's teacher temperature")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        ap.error(f"--modes: a comma-separated subset of {', '.join(MODES)}")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from goalpost_roles import load_goalposts   # its sibling script: one reader of goalpost files
    from selfplay_core.roles.teacher import teacher_prompt
    from selfplay_core.sandbox import Executor, SandboxConfig

    torch.set_num_threads(2)
    if args.proposals < 1 or args.temperature <= 0:
        ap.error("--proposals must be at least 1 and --temperature above 0")
    if not (Path(args.model_dir) / "config.json").is_file():
        ap.error(f"{args.model_dir}: not a checkpoint folder (no config.json)")
    try:
        ids, by_id, _ = load_goalposts(Path(args.goalposts_json), args.deep_pool, args.world_seed)
    except ValueError as e:
        ap.error(str(e))
    sources = [by_id[g] for g in ids for _ in range(args.proposals)]
    model = AutoModelForCausalLM.from_pretrained(args.model_dir).eval()
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    prompts = [teacher_prompt(s.description(), s.program(), "f", "easier") for s in sources]
    print(f"{len(ids)} goalposts x {args.proposals} lemma proposals, T = {args.temperature}, "
          f"{args.model_dir}")
    print("| decoding | parsed | valid | faithful | true one-step lemmas | goalposts with one "
          "| steps dropped (parsed questions) | one-step drops that are not true lemmas |")
    print("|---|---|---|---|---|---|---|---|")
    with Executor(SandboxConfig(workers=2)) as ex:
        for mode in modes:
            t0 = time.monotonic()
            fn = make_constraint(mode, tok, model.config.vocab_size, prompts, sources)
            ids_out = constrained_sample(model, tok, prompts, fn, temperature=args.temperature,
                                         max_new_tokens=args.max_new_tokens, seed=args.seed)
            texts = [tok.decode(o, skip_special_tokens=True) for o in ids_out]
            g = grade(ex, sources, texts)
            n = g["prompts"]
            print(f"| {mode} | {g['parsed']}/{n} | {g['valid']} | {g['faithful']} | {g['true']} "
                  f"| {g['goalposts_with_true']}/{len(ids)} | {g['drops']} | {g['one_step_not_true']} |",
                  flush=True)
            print(f"<!-- {mode}: {time.monotonic() - t0:.0f} s -->", file=sys.stderr)

    # the goalposts against as many other pool tasks of their depth (a seeded draw)
    depth = max(by_id[g].depth for g in ids)
    others = sorted(i for i, t in by_id.items() if t.depth == depth and i not in set(ids))
    random.Random(f"others:{args.seed}").shuffle(others)
    n_samples = min(args.proposals, 8)
    print(f"\nThe teacher's log-probability of its sources' true one-step lemmas (Task and Solution "
          f"sections, the most likely per source) against its own {n_samples} free proposals per source:")
    print("| sources | with both | true lemma | own proposals, median | own proposals, best "
          "| true above the median | true above the best |")
    print("|---|---|---|---|---|---|---|")
    for name, group in ((f"its {len(ids)} goalposts", ids),
                        (f"{len(others[:len(ids)])} other depth-{depth} pool tasks", others[:len(ids)])):
        print(likelihood_row(model, tok, name, [by_id[g] for g in group], n_samples, args.temperature,
                             args.max_new_tokens, args.seed), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
