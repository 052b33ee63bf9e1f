"""The toy world: a synthetic code-task world and a tiny model that learns in it on 2 CPU cores.
A world plug-in (`selfplay_core.worlds`): `world.py` registers it, and only the plug-in list
(`selfplay_core/worlds/plugins.py`) names this package outside it.

    world.py       the plug-in: `world: toy` config section, ToyWorld (splits -> the run's
                   problems), ToyOracle (the diagnostics' ground truth), frontier mining hook,
                   default model (the bootstrap), documents (library.py), checkpoint benchmark
    arms.py        the oracle arms of the learning study, registered as methods
                   (`oracle-curriculum`, `oracle-filter`)
    tasks.py       Task = input representation + chain of primitives + output representation;
                   description, reference program, inputs, `make_problem` -> ordinary Problem
    primitives.py  the primitives (one line of code + one English phrase each)
    variants.py    f-axis (remove/add/replace a step) and io-axis (change a representation) variants
    splits.py      seeded, versioned, hashed splits: train (depth 1-2), eval (1-4), goalpost pool (3-4)
    fidelity.py    does a question describe its program? (diagnostic for proposal logs)
    corpus.py      pretraining texts: noisy student examples + teacher variant pairs
    tokenizer.py   BPE trained with `tokenizers`, saved as a Qwen2Tokenizer
    model.py       the Qwen2-class tiny model
    pretrain.py    the causal-LM pretraining loop
    bootstrap.py   corpus -> tokenizer -> model -> training -> cached HF folder
    diagnostics.py pass@k by depth, teacher validity (diagnostics; sampling + verification is
                   selfplay_core.solve)
    metrics.py     unbiased pass@k
    pg.py          student-only policy gradient (RL sanity check)

Goalpost mining lives in `selfplay_core.goalposts`; role prompts and parsers in `selfplay_core.roles`.
"""

