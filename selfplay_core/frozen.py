"""The base of every config section: frozen, no unknown keys, and in its JSON schema each field's
description taken from the comment written beside it in the source, so the Prefect run form
explains a field in the words its code does (and cannot drift).

A field's description is the comment block directly above it (no blank line between) plus a
comment on its own lines; a `Field(description=...)` given explicitly wins, and a field a
subclass redefines without a comment keeps its parent's.
"""

from __future__ import annotations

import ast
import functools
import inspect
import io
import linecache
import tokenize

from pydantic import BaseModel, ConfigDict


def field_comments(cls: type) -> dict[str, str]:
    """{field name: its comment text} for the annotated fields written in `cls`'s own body."""
    try:
        path = inspect.getsourcefile(cls)
    except TypeError:  # a built-in or run-time class: no source, no descriptions
        return {}
    return _module_comments(path).get(cls.__qualname__, {}) if path else {}


@functools.lru_cache(maxsize=None)
def _module_comments(path: str) -> dict[str, dict[str, str]]:
    """{class qualname: field comments} of every class in one source file. Each file is read,
    tokenized and parsed once (inspect.getsource would parse the whole module again for every
    class, on every import of the config)."""
    try:
        src = "".join(linecache.getlines(path)) or open(path).read()
    except OSError:
        return {}
    comments: dict[int, tuple[str, bool]] = {}   # line -> (text, whole line is the comment)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            own_line = not tok.line[:tok.start[1]].strip()
            comments[tok.start[0]] = (tok.string.lstrip("#").strip(), own_line)
    out: dict[str, dict[str, str]] = {}

    def visit(body, prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                name = prefix + node.name
                out[name] = _fields(node, comments)
                visit(node.body, name + ".")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body, f"{prefix}{node.name}.<locals>.")

    visit(ast.parse(src).body, "")
    return out


def _fields(node: ast.ClassDef, comments: dict[int, tuple[str, bool]]) -> dict[str, str]:
    out = {}
    for field in node.body:
        if not (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)):
            continue
        above, line = [], field.lineno - 1
        while line in comments and comments[line][1]:
            above.insert(0, comments[line][0])
            line -= 1
        beside = [comments[n][0] for n in range(field.lineno, field.end_lineno + 1)
                  if n in comments and not comments[n][1]]
        text = " ".join(t for t in above + beside if t)
        if text:
            out[field.target.id] = text
    return out


class FrozenConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema, handler):
        # Descriptions are read from the source only when a schema is asked for (the run form,
        # a deployment), never when a config is imported or validated.
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        for name, prop in target.get("properties", {}).items():
            if "description" not in prop:
                text = _description(cls, name)
                if text:
                    prop["description"] = text
        return schema


def _description(cls: type, name: str) -> str | None:
    """The field's comment in the class that writes it; a field redefined without one (a
    method's `name: Literal[...]`) keeps what its parent said of it."""
    for base in cls.__mro__:
        if name not in vars(base).get("__annotations__", {}):
            continue
        info = base.model_fields.get(name) if issubclass(base, BaseModel) else None
        text = field_comments(base).get(name) or (info.description if info else None)
        if text:
            return text
    return None
