"""SPICE's corpora: the toy library pages, a folder of code files and a Hugging Face dataset of
them (loaded by `datasets` from local files), and which functions become documents."""

import json
import random

import pytest

from selfplay_core.datasets.documents import documents_from_source, folder_documents, hub_documents
from selfplay_core.problems import InputError
from selfplay_core.toyworld.library import toy_documents
from selfplay_core.toyworld.primitives import PRIMITIVES
from selfplay_core.toyworld.tasks import NATIVE, Task, sample_base_value

FILE = '''"""A module."""
import math
import os
from collections import Counter

SCALE = 3


def _helper(v):
    return v * SCALE


def scaled_norm(xs):
    """Euclidean norm of the scaled values."""
    return math.sqrt(sum(_helper(v) ** 2 for v in xs))


def most_common(xs, k):
    """The k most common values."""
    return [v for v, _ in Counter(xs).most_common(k)]


def home():
    """Reads the environment."""
    return os.environ.get("HOME")


def undocumented(x):
    return x


def with_default(x, y=1):
    """Has a default."""
    return x + y
'''


def test_the_toy_library_has_one_page_per_primitive_and_constant():
    docs = toy_documents()
    assert len(docs) == sum(len(p.consts) or 1 for p in PRIMITIVES.values())
    assert len({d.id for d in docs}) == len(docs)
    rng = random.Random(0)
    for d in docs:
        name, _, c = d.id.removeprefix("toy:").partition(":")
        p = PRIMITIVES[name]
        const = None if not c else (c if isinstance(p.consts[0], str) else int(c))
        ref = Task(NATIVE[p.in_type], ((name, const),), NATIVE[p.out_type]).function()
        ns = {}
        exec(d.source, ns)
        for _ in range(5):
            v = sample_base_value(p.in_type, rng)
            assert ns["f"](v) == ref(v), d.id
        assert ns["f"].__doc__ == d.description and d.signature == "def f(x):"


def test_documents_from_code_keep_what_runs_on_its_own():
    docs = {d.entry_point: d for d in documents_from_source(FILE, "m.py")}
    # os is not an allowed import; no docstring; a default value; a private helper: left out.
    assert set(docs) == {"scaled_norm", "most_common"}
    norm = docs["scaled_norm"]
    # The helper, the constant it reads and the import come along, so the source runs alone.
    ns = {}
    exec(norm.source, ns)
    assert ns["scaled_norm"]([1, 2]) == pytest.approx((9 + 36) ** 0.5)
    assert "import os" not in norm.source and "most_common" not in norm.source
    assert (norm.signature, norm.n_params, norm.description) == \
        ("def scaled_norm(xs):", 1, "Euclidean norm of the scaled values.")
    mc = docs["most_common"]
    assert mc.n_params == 2 and "from collections import Counter" in mc.source
    assert documents_from_source("def broken(:\n", "x.py") == []


def test_a_folder_of_code_files(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(FILE)
    (tmp_path / "b.py").write_text('def twice(x):\n    """Twice x."""\n    return 2 * x\n')
    (tmp_path / "notes.txt").write_text('def ignored(x):\n    """Not Python."""\n')
    docs = folder_documents(tmp_path)
    assert sorted(d.entry_point for d in docs) == ["most_common", "scaled_norm", "twice"]
    assert any(d.id.startswith("pkg/a.py:") for d in docs)
    with pytest.raises(InputError, match="not a folder"):
        folder_documents(tmp_path / "missing")


def test_a_hugging_face_dataset_of_code_files_from_local_files(tmp_path):
    rows = [{"content": FILE, "path": "a.py"},
            {"content": 'def twice(x):\n    """Twice x."""\n    return 2 * x\n', "path": "b.py"},
            {"content": "not python (", "path": "c.py"}]
    data = tmp_path / "code.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # A data file, and a dataset folder as `datasets.load_dataset(folder)` reads it.
    assert sorted(d.entry_point for d in hub_documents(str(data))) == ["most_common", "scaled_norm", "twice"]
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "train.jsonl").write_text(data.read_text())
    docs = hub_documents(str(folder), max_rows=1)
    assert sorted(d.entry_point for d in docs) == ["most_common", "scaled_norm"]
    with pytest.raises(InputError, match="has columns"):
        hub_documents(str(data), column="code")
