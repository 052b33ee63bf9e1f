"""Document corpora: the grounding of SPICE / SCOPE (`methods.spice`).

A `Document` is one documented function: its source (docstring included) is what the Challenger
reads; the function itself is the reference behaviour of every task written from it (the
executor runs it for the expected outputs). The Reasoner never sees a document.

Three sources, one parser:

* `toyworld.library.toy_documents()` — the toy world's primitives library rendered as
  documentation pages;
* `folder_documents(path)` — every `*.py` file under a folder;
* `hub_documents(path, ...)` — a Hugging Face dataset of code files through `datasets`
  (a hub id, or a local folder / data file that `datasets.load_dataset` reads).

From code, `documents_from_source` keeps each top-level function that has a docstring, plain
positional parameters, only allowed imports, and whose helpers (other top-level functions and
assignments it refers to) are in the same file; the document's source is those imports, helpers
and the function, so it runs on its own.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from selfplay_core.problems import InputError

# What a document's code may import (pure computation only; the proposal gate's list).
ALLOWED_IMPORTS = frozenset({"math", "collections", "itertools", "functools", "heapq", "bisect",
                             "re", "string", "typing", "operator", "fractions", "decimal",
                             "statistics", "copy", "array", "dataclasses", "enum"})
MAX_SOURCE_CHARS = 4000   # a longer function is not one page a Challenger reads whole


@dataclass(frozen=True)
class Document:
    id: str
    source: str          # runnable: imports, helpers, the documented function (docstring kept)
    entry_point: str     # the documented function
    description: str     # its docstring
    signature: str       # `def name(a, b):` — the header the Reasoner is posed with
    n_params: int

    @property
    def title(self) -> str:
        return self.entry_point


# ---- documents from code -----------------------------------------------------------------------

def _imports_ok(node: ast.stmt) -> bool:
    names = ([a.name for a in node.names] if isinstance(node, ast.Import)
             else [node.module or ""])
    return all(n.split(".")[0] in ALLOWED_IMPORTS for n in names)


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return set()


def documents_from_source(text: str, origin: str) -> list[Document]:
    """The documented functions of one Python file (see the module docstring). A file that does
    not parse gives none."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    top = {name: node for node in tree.body for name in _defined(node)}
    docs = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        desc = ast.get_docstring(node)
        a = node.args
        if not desc or a.vararg or a.kwarg or a.kwonlyargs or a.defaults or node.decorator_list:
            continue
        n_params = len(a.posonlyargs) + len(a.args)
        if n_params == 0:
            continue
        needed = _closure(node, top)
        if needed is None:
            continue
        parts = [ast.get_source_segment(text, n) for n in tree.body if n in needed]
        source = "\n\n".join(p for p in parts if p) + "\n"
        if len(source) > MAX_SOURCE_CHARS:
            continue
        params = ", ".join(x.arg for x in a.posonlyargs + a.args)
        digest = hashlib.sha256(source.encode()).hexdigest()[:8]
        docs.append(Document(f"{origin}:{node.name}:{digest}", source, node.name,
                             " ".join(desc.split()), f"def {node.name}({params}):", n_params))
    return docs


def _closure(fn: ast.FunctionDef, top: dict[str, ast.stmt]) -> list[ast.stmt] | None:
    """The top-level statements `fn` needs (itself included), or None when one of them is an
    import outside ALLOWED_IMPORTS or a class (a document is plain functions and values)."""
    seen: list[ast.stmt] = []
    todo = [fn]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not _imports_ok(node):
            return None
        if isinstance(node, ast.ClassDef):
            return None
        seen.append(node)
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Import, ast.ImportFrom)) and sub is not node and not _imports_ok(sub):
                return None
            if isinstance(sub, ast.Name) and sub.id in top and top[sub.id] not in seen:
                todo.append(top[sub.id])
    return seen


def folder_documents(path: str | Path, pattern: str = "**/*.py") -> list[Document]:
    root = Path(path)
    if not root.is_dir():
        raise InputError(f"method.corpus.path {root}: not a folder (a folder of .py files)")
    docs = []
    for f in sorted(root.glob(pattern)):
        if f.is_file():
            try:
                text = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            docs += documents_from_source(text, f.relative_to(root).as_posix())
    return docs


def hub_documents(path: str, *, name: str | None = None, split: str = "train",
                  column: str = "content", max_rows: int | None = None) -> list[Document]:
    """A dataset of code files via `datasets.load_dataset(path, name, split=split)`: a hub id,
    or a local folder or file of json/jsonl/parquet/csv rows. `column` holds each file's text.
    With `max_rows` the dataset is streamed, so only those rows are downloaded and read."""
    try:
        import datasets
    except ImportError as e:
        raise InputError(f"method.corpus.path {path}: reading a dataset needs the 'datasets' "
                         "package: pip install 'selfplay[hub]' (or a folder of source files "
                         "needs nothing more)") from e

    local = Path(path)
    kw = {"split": split, "streaming": max_rows is not None}
    if local.is_file():
        kind = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}.get(local.suffix)
        if kind is None:
            raise InputError(f"method.corpus.path {path}: a data file must be .jsonl, .json, "
                             ".parquet or .csv")
        ds = datasets.load_dataset(kind, data_files=str(local), **kw)
    else:
        ds = datasets.load_dataset(path, name, **kw)
    docs = []
    for i, row in enumerate(ds):
        if max_rows is not None and i >= max_rows:
            break
        if column not in row:
            raise InputError(f"method.corpus.column {column!r}: the dataset {path} has columns "
                             f"{sorted(row)}")
        text = row[column]
        if isinstance(text, str):
            docs += documents_from_source(text, f"{Path(path).name}[{i}]")
    return docs


def dedupe(docs: Iterable[Document]) -> list[Document]:
    """The first of documents with identical source."""
    seen, out = set(), []
    for d in docs:
        if d.source not in seen:
            seen.add(d.source)
            out.append(d)
    return out
