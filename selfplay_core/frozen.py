"""The base of every config section: frozen, no unknown keys, and each field's description taken
from the comment written beside it in the source, so the Prefect run form, `--help`-style
listings and the JSON schema explain a field in the words its code does (and cannot drift).

A field's description is the comment block directly above it (no blank line between) plus a
comment on its own lines; a `Field(description=...)` given explicitly wins, and a field a
subclass redefines without a comment keeps its parent's.
"""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize

from pydantic import BaseModel, ConfigDict


def field_comments(cls: type) -> dict[str, str]:
    """{field name: its comment text} for the annotated fields written in `cls`'s own body."""
    try:
        src = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # a class built at run time has no source: no descriptions
        return {}
    comments: dict[int, tuple[str, bool]] = {}   # line -> (text, whole line is the comment)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            own_line = not tok.line[:tok.start[1]].strip()
            comments[tok.start[0]] = (tok.string.lstrip("#").strip(), own_line)
    body = ast.parse(src).body[0].body
    out = {}
    for node in body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above, line = [], node.lineno - 1
        while line in comments and comments[line][1]:
            above.insert(0, comments[line][0])
            line -= 1
        beside = [comments[n][0] for n in range(node.lineno, node.end_lineno + 1)
                  if n in comments and not comments[n][1]]
        text = " ".join(t for t in above + beside if t)
        if text:
            out[node.target.id] = text
    return out


class FrozenConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        described = False
        texts = field_comments(cls)
        for name, info in cls.model_fields.items():
            if info.description is not None:
                continue
            # A field redefined without a comment (a method's `name: Literal[...]`) keeps the
            # description its parent gave it.
            text = texts.get(name) or next(
                (base.model_fields[name].description for base in cls.__mro__[1:]
                 if isinstance(base, type) and issubclass(base, BaseModel) and name in base.model_fields
                 and base.model_fields[name].description), None)
            if text:
                info.description = text
                described = True
        if described:  # the schema was built before this hook: build it again with them
            cls.model_rebuild(force=True)
