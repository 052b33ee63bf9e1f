"""The toy world's primitives library as documentation pages: SPICE's corpus in the toy world."""

from __future__ import annotations

from selfplay_core.datasets.documents import Document
from selfplay_core.toyworld.primitives import PRIMITIVES
from selfplay_core.toyworld.tasks import NATIVE, Task


def toy_documents() -> list[Document]:
    """One page per (primitive, constant) of the toy world, on the primitive's native input and
    output types; the docstring is the task description the toy model reads and writes."""
    docs = []
    for p in PRIMITIVES.values():
        for c in (p.consts or (None,)):
            task = Task(NATIVE[p.in_type], ((p.name, c),), NATIVE[p.out_type])
            desc = task.description()
            lines = task.program().splitlines()
            source = "\n".join([lines[0], f'    """{desc}"""', *lines[1:]]) + "\n"
            suffix = "" if c is None else f":{c}"
            docs.append(Document(f"toy:{p.name}{suffix}", source, "f", desc, "def f(x):", 1))
    return docs
