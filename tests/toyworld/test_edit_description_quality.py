"""toyworld.role_quality.edit_description_quality: how the teacher's question for a forced
statement deletion is scored. The model is scripted (its text is the input under test; a real
model's cannot be chosen); the sandbox, the parser and the fidelity check are the real ones."""

import random

from transformers import AutoTokenizer

from selfplay_core.engines.base import Completion
from selfplay_core.toyworld.bootstrap import ASSET_DIR
from selfplay_core.toyworld.guide_oracle import parse_program
from selfplay_core.toyworld.role_quality import edit_description_quality


class PromptReadingModel:
    """Answers each prompt with `answers[i](forced program's task)`; keeps the prompts."""

    def __init__(self, answers):
        self.answers, self.prompts, self.sp = answers, [], None
        self.tokenizer = AutoTokenizer.from_pretrained(ASSET_DIR)

    def generate(self, prompts, n, sp):
        self.prompts, self.sp = list(prompts), sp
        out = []
        for prompt, answer in zip(prompts, self.answers):
            forced = prompt.rsplit("### Solution\n", 1)[1].split("### Task\n", 1)[0]
            out.append([Completion(answer(parse_program(forced)))])
        return out


def _inputs(values):
    return "".join(f"{v!r}\n" for v in values)


def test_scores_parsed_valid_faithful_and_true_against_the_forced_program(world, executor):
    rng = random.Random(0)
    sources = [t for t in world.goalpost_pool.tasks if t.depth == 4 and t.in_rep == "ints"][:4]
    answers = [
        # the forced program's own description, with inputs it runs on
        lambda t: f"{t.description()}\n### Inputs\n{_inputs(t.sample_inputs(rng, 4))}### End\n",
        # no sections at all
        lambda t: "nonsense",
        # a list-of-numbers program fed plain numbers crashes: parsed, not valid
        lambda t: f"{t.description()}\n### Inputs\n7\n8\n### End\n",
        # runs, but the question is not a description of anything
        lambda t: f"Do something to the list.\n### Inputs\n{_inputs([[1, 2], [3, 4, 5]])}### End\n",
    ]
    model = PromptReadingModel(answers)
    q = edit_description_quality(model, executor, sources, temperature=0.4, seed=1, max_new_tokens=256)
    assert (q.prompts, q.parsed, q.valid, q.faithful, q.true_variant) == (4, 3, 2, 1, 1)
    # each prompt is the lemma prompt of its source with a forced deletion of one of its lines
    for src, prompt in zip(sources, model.prompts):
        head, forced = prompt.split("### Variant: easier, axis f\n")
        assert head.startswith(f"### Task\n{src.description()}\n")
        program = forced.split("### Solution\n", 1)[1].split("### Task\n", 1)[0].splitlines()
        assert len(program) == len(src.program().splitlines()) - 1
    # the forced program spends the budget, as in the loop
    assert 0 < model.sp.max_new_tokens < 256
