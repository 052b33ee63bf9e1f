"""The teacher phase's completion-only loss: a teacher example's prompt (its source question and
program) is context, not a target, so the phase trains copying a program with a step dropped
without training anyone to write the source's program from its question. The split point, its
token index and the loss actually trained are each checked against values the test computes
itself."""

import copy
import math
import random

import pytest

from selfplay_core.roles.teacher import teacher_prompt
from selfplay_core.toyworld.corpus import completion_start, student_example, teacher_example
from selfplay_core.toyworld.tasks import sample_task
from selfplay_core.toyworld.variants import variant


def _pair(seed=3, depth=4):
    rng = random.Random(seed)
    while True:
        src = sample_task(rng, depth)
        dst = variant(src, "f", "easier", rng)
        if dst is not None:
            return src, dst, rng


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    return AutoModelForCausalLM.from_pretrained(ASSET_DIR), AutoTokenizer.from_pretrained(ASSET_DIR)


def test_a_teacher_example_trains_from_the_end_of_its_prompt_and_others_from_the_start():
    src, dst, rng = _pair()
    text = teacher_example(src, dst, "f", "easier", rng, 0.0, 4)
    prompt = teacher_prompt(src.description(), src.program(), "f", "easier")
    assert text.startswith(prompt) and completion_start(text) == len(prompt)
    assert text[completion_start(text):].startswith("### Task\n" + dst.description().strip())
    assert completion_start(student_example(src, rng, 0.0)) == 0


def test_encoded_starts_land_on_the_first_token_of_the_completion(tiny):
    from selfplay_core.toyworld.pretrain import encode_with_starts

    _, tok = tiny
    src, dst, rng = _pair(5)
    texts = [teacher_example(src, dst, "io", "easier", rng, 0.0, 4), student_example(src, rng, 0.0)]
    encoded, starts = encode_with_starts(tok, texts, [completion_start(t) for t in texts])
    ids = tok(texts[0], add_special_tokens=False)["input_ids"]
    assert encoded[0] == ids   # the same ids a plain tokenization gives
    assert starts[1] == 0 and 0 < starts[0] < len(ids)
    # the prompt ends in a newline, so the tokens before and from the start split the text there
    assert tok.decode(ids[starts[0]:]) == texts[0][completion_start(texts[0]):]
    assert tok.decode(ids[:starts[0]]) == texts[0][:completion_start(texts[0])]


@pytest.mark.parametrize("masked", [True, False])
def test_the_loss_trained_is_the_loss_on_the_targets_only(tiny, masked):
    import torch

    from selfplay_core.toyworld.pretrain import TrainSettings, encode_with_starts, pretrain

    model, tok = tiny
    model = copy.deepcopy(model)
    src, dst, rng = _pair(7)
    text = teacher_example(src, dst, "f", "easier", rng, 0.0, 4)
    (ids,), (start,) = encode_with_starts(tok, [text], [completion_start(text)])
    k = start if masked else 0
    # expected: mean next-token cross-entropy over positions k..n-1, from the logits directly
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    logp = torch.log_softmax(logits[:-1], -1)
    targets = torch.tensor(ids[1:])
    per_token = -logp[torch.arange(len(ids) - 1), targets]
    expected = per_token[max(k - 1, 0):].mean().item()
    seen = []
    pretrain(model, [ids], TrainSettings(batch_size=1, lr=1e-6), 0, tok.pad_token_id,
             progress=lambda s, t, loss: seen.append(loss), loss_from=[k])
    assert seen and math.isclose(seen[0], expected, rel_tol=1e-4)
    if masked:   # and it is not the loss over every token: the mask changed what trains
        assert not math.isclose(expected, per_token.mean().item(), rel_tol=1e-2)


def test_loss_from_must_cover_every_example(tiny):
    from selfplay_core.toyworld.pretrain import TrainSettings, pretrain

    model, tok = tiny
    with pytest.raises(ValueError, match="loss_from has 1 entries for 2 examples"):
        pretrain(copy.deepcopy(model), [[1, 2, 3], [4, 5]], TrainSettings(), 0, tok.pad_token_id,
                 loss_from=[0])
