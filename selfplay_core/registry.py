"""The plug-in slots a run config picks by name — `method:` and `world:` — share one registry:
a class registers under its config section's `name`, the section's schema is titled by that
name (the Prefect run form then offers each plug-in as a form labelled by it), and an unknown
name is one error listing the known ones."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T", bound=type)


def titled_by_name(schema: dict, cls) -> None:
    """`json_schema_extra` of a section chosen by name: the form shows the name, not the class."""
    field = cls.model_fields.get("name")
    if field is not None and isinstance(field.default, str):
        schema["title"] = field.default


def form_friendly_union(schema: dict) -> None:
    """A discriminated union's JSON schema as `anyOf` (each choice a form of its own), not
    `oneOf` + `discriminator`: the Prefect UI renders `anyOf` as a choice of forms but shows a
    raw JSON editor for `oneOf`. Validation still dispatches on the discriminator; only the
    schema a form is drawn from changes."""
    if "oneOf" in schema:
        schema["anyOf"] = schema.pop("oneOf")
        schema.pop("discriminator", None)


class Registry(Generic[T]):
    def __init__(self, kind: str, config_base: type):
        self.kind, self.config_base = kind, config_base
        self._classes: dict[str, T] = {}

    def register(self, cls: T) -> T:
        """Class decorator: make `cls` available under its `Config`'s `name`."""
        field = cls.Config.model_fields.get("name")
        name = field.default if field is not None else None
        if not isinstance(name, str) or cls.Config is self.config_base:
            raise TypeError(f"{cls.__name__}.Config must be a {self.config_base.__name__} subclass "
                            "with `name: Literal[...] = ...`")
        known = self._classes.get(name)
        if known is not None and known is not cls:
            raise ValueError(f"{self.kind} {name!r} is registered twice ({known.__name__}, "
                             f"{cls.__name__})")
        cls.name = name
        self._classes[name] = cls
        return cls

    def all(self) -> dict[str, T]:
        """{name: class}, in registration order."""
        return dict(self._classes)

    def get(self, name: str) -> T:
        try:
            return self._classes[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; one of {sorted(self._classes)}") from None
