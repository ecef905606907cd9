"""Options generated from the config models, so each is declared once, in `fasttts.config`.

A field's type, default and range, and its line in the "Attributes:" section of its class's
docstring (a pydantic model's, or for flags also a dataclass's, e.g. the planner's
`PlanInput`), become a command-line flag (`add_flags`, `flag_values`, `flag_defaults`) or a
field of a request model (`copied_fields`), as vLLM generates its CLI from the field docs of
its config dataclasses (`get_attr_docs`). `describe_error` turns a config's `ValidationError` into
the one line the front ends report.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, Field, ValidationError
from pydantic.fields import FieldInfo

from fasttts.jsonio import field_errors
from fasttts.search import SearchConfigError

__all__ = ["add_flags", "attr_docs", "copied_fields", "describe_error", "flag_defaults",
           "flag_name", "flag_values"]

#: An entry of a Google-style "Attributes:" section: `name: text` or `a, b: text`.
_ENTRY = re.compile(r"^(\w+(?:, \w+)*): (.*)$")


def attr_docs(model: type[BaseModel]) -> dict[str, str]:
    """Each field's description from the "Attributes:" section of `model`'s docstring, its
    lines joined (an entry `a, b: text` describes both a and b). The section ends at its first
    blank or unindented line; fields without an entry are left out."""
    lines = inspect.cleandoc(model.__doc__ or "").splitlines()
    section = lines[lines.index("Attributes:") + 1:] if "Attributes:" in lines else []
    docs: dict[str, list[str]] = {}
    names: list[str] = []
    indent = None  # of the entries; deeper lines continue the entry above
    for line in section:
        depth = len(line) - len(line.lstrip())
        if not line.strip() or depth == 0:
            break
        indent = depth if indent is None else indent
        entry = _ENTRY.match(line.strip()) if depth == indent else None
        if entry:
            names = entry.group(1).split(", ")
            for name in names:
                docs[name] = [entry.group(2)]
        else:
            for name in names:
                docs[name].append(line.strip())
    return {name: " ".join(parts) for name, parts in docs.items()}


def _base_type(annotation: Any) -> Any:
    """`annotation` without a `None` alternative (`int | None` -> `int`)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def flag_name(field: str) -> str:
    """The command-line flag of a config field: `beam_width` -> `--beam-width`."""
    return "--" + field.replace("_", "-")


def _help(doc: str, *, prefix: str = "", note: str = "", default: Any = None) -> str:
    """Argparse help from a field's doc: backticks dropped, `prefix` before and `note` after
    it, then the default (none for `None`)."""
    text = prefix + doc.replace("`", "").rstrip(".") + note
    if default is not None:
        text += f" (default: {default})"
    return text.replace("%", "%%")  # argparse formats help with %


#: A field without a default (required, or made by a default factory).
_NO_DEFAULT = object()


def _fields(model: type) -> dict[str, tuple[Any, Any]]:
    """name -> (type, default or `_NO_DEFAULT`) of each field of a pydantic model or a
    dataclass (whose string annotations are resolved)."""
    if dataclasses.is_dataclass(model):
        hints = typing.get_type_hints(model)
        return {f.name: (hints[f.name], _NO_DEFAULT if f.default is dataclasses.MISSING
                         else f.default) for f in dataclasses.fields(model)}
    return {name: (info.annotation, _NO_DEFAULT if info.is_required() or info.default_factory
                   else info.default) for name, info in model.model_fields.items()}


def add_flags(group, model: type, names: Iterable[str], *,
              given_only: Iterable[str] = (), flags: Mapping[str, str] | None = None,
              dests: Mapping[str, str] | None = None,
              metavars: Mapping[str, str] | None = None,
              types: Mapping[str, Callable[[str], Any]] | None = None,
              defaults: Mapping[str, Any] | None = None,
              shown: Mapping[str, str | None] | None = None,
              prefixes: Mapping[str, str] | None = None,
              notes: Mapping[str, str] | None = None) -> None:
    """Add one flag per field of `model` (a pydantic model or a dataclass) in `names` to
    `group` (an argparse parser or group).

    The flag is `--field-name` (or `flags[name]`) into `args.<field>` (or `dests[name]`); its
    type (or `types[name]`, e.g. a size parser), choices (a `Literal`) and default (or
    `defaults[name]`) are the field's, a `bool` field is a switch (`--x`; `--x / --no-x`
    when its default is on, None or given-only: those must tell "off" from "not given"), and
    its help is the field's
    doc (`attr_docs`) between `prefixes[name]` and `notes[name]`, then the default (or
    `shown[name]`; None shows none). A field in `given_only` defaults to None on the command
    line, so it reaches the config only when given (`flag_values`); its help still shows the
    config's default. Ranges are not checked here: the config checks them when it is built.

    Raises:
        KeyError: a name is not a field of `model`, or has no doc.
        TypeError: a field type no flag is made for (only bool, int, float, str, Literal), or
            a field without a default that is neither given-only nor in `defaults`.
    """
    docs, fields, given_only = attr_docs(model), _fields(model), set(given_only)
    for name in names:
        annotation, default = fields[name]
        if defaults and name in defaults:
            default = defaults[name]
        kind = _base_type(annotation)
        kw: dict[str, Any] = {"dest": (dests or {}).get(name, name)}
        if metavars and name in metavars:
            kw["metavar"] = metavars[name]
        if kind is bool:
            # a plain switch, unless the field's default is on, or "not given" must stay
            # apart from "off" (a given-only or optional field): then --x / --no-x
            tristate = annotation is not bool or name in given_only or default is True
            kw.update(action=argparse.BooleanOptionalAction if tristate else "store_true")
            if tristate:
                kw["default"] = None if name in given_only or default is _NO_DEFAULT else default
        elif typing.get_origin(kind) is Literal:
            kw.update(choices=typing.get_args(kind))
        elif kind in (int, float):
            kw.update(type=kind)
        elif kind is not str:
            raise TypeError(f"no command-line flag for {model.__name__}.{name}: {kind!r}")
        if types and name in types:
            kw["type"] = types[name]
        if default is _NO_DEFAULT and name not in given_only:
            raise TypeError(f"the flag of {model.__name__}.{name} needs a default: the field "
                            f"has none; make it given-only or give one")
        if kind is not bool:
            kw["default"] = None if name in given_only else default
        text = None if kind is bool or default is _NO_DEFAULT else default
        if shown and name in shown:
            text = shown[name]
        kw["help"] = _help(docs[name], prefix=(prefixes or {}).get(name, ""),
                           note=(notes or {}).get(name, ""), default=text)
        group.add_argument((flags or {}).get(name, flag_name(name)), **kw)


def flag_defaults(model: type[BaseModel], names: Iterable[str],
                  given_only: Iterable[str] = ()) -> dict[str, Any]:
    """The values `add_flags` gives the fields `names` when no flag is given (for a command
    that takes none of them: `parser.set_defaults(**flag_defaults(...))`)."""
    given_only = set(given_only)
    return {name: None if name in given_only else model.model_fields[name].default
            for name in names}


def flag_values(args: argparse.Namespace, names: Iterable[str],
                given_only: Iterable[str] = ()) -> dict[str, Any]:
    """The config fields `names` as parsed into `args` (by `add_flags`): every one, except
    the `given_only` ones not given."""
    given_only = set(given_only)
    return {name: getattr(args, name) for name in names
            if name not in given_only or getattr(args, name) is not None}


def copied_fields(model: type[BaseModel], names: Iterable[str],
                  optional: Iterable[str] = ()) -> dict[str, tuple[Any, FieldInfo]]:
    """Field definitions for `pydantic.create_model`: the fields `names` of `model` with their
    types, ranges (`Annotated` constraints), defaults and docs (as `description`); an
    `optional` one also takes None and defaults to None (the caller fills in the config's
    default)."""
    docs, optional = attr_docs(model), set(optional)
    fields = {}
    for name in names:
        info = model.model_fields[name]
        kind = _base_type(info.annotation) if name in optional else info.annotation
        if info.metadata:  # the range (annotated_types Gt, Le, ...)
            kind = Annotated[(kind, *info.metadata)]
        if name in optional:
            fields[name] = (Optional[kind], Field(default=None, description=docs[name]))
        else:
            default = info.get_default(call_default_factory=True)
            fields[name] = (kind, Field(default=default, description=docs[name]))
    return fields


def describe_error(error: ValidationError) -> str:
    """One line for an invalid configuration: the rules of the search method
    (`fasttts.search.SearchConfigError`) as they read when they are all it reports, else
    "invalid configuration: " and each field's message ("n: Input should be greater than 0;
    ...")."""
    errors = error.errors()
    rules = [str(e["ctx"]["error"]) for e in errors
             if isinstance(e.get("ctx", {}).get("error"), SearchConfigError)]
    if rules and len(rules) == len(errors):
        return "; ".join(rules)
    return "invalid configuration: " + field_errors(error)
