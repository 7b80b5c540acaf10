"""Typed records read from and written to the dicts that cross between the engine and its
children (fitness.common.messages): each field checked against its type hint on the way in, so a
field of the wrong type is a BadMessage that names it, never a value used as it came."""
from __future__ import annotations

import dataclasses
import types
from dataclasses import field
from typing import Any, Self, Union, cast, get_args, get_origin, get_type_hints

_OMIT = "omit_default"


class BadMessage(ValueError):
    """A message with a field missing, unknown or of the wrong type; the text names it."""


def optional(default: Any) -> Any:
    """A field left off the wire while it holds its default, as the engine's dicts always left it."""
    return field(default=default, metadata={_OMIT: True})


class Record:
    """A dataclass read from and written to its wire dict by its type hints."""

    @classmethod
    def from_wire(cls, d: Any) -> Self:
        if not isinstance(d, dict):
            raise BadMessage(f"{cls.__name__} is {_kind(d)}, not a dict")
        hints = _hints(cls)
        values = {}
        for f in dataclasses.fields(cast(Any, cls)):
            if f.name in d:
                values[f.name] = _check(d[f.name], hints[f.name], f.name)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise BadMessage(f"{cls.__name__} has no {f.name!r}")
        return cast(Any, cls)(**values)

    def to_wire(self) -> dict:
        hints = _hints(type(self))
        out = {}
        for f in dataclasses.fields(cast(Any, self)):
            value = getattr(self, f.name)
            if not (f.metadata.get(_OMIT) and value == f.default):
                out[f.name] = _wire(value, hints[f.name])
        return out


_HINTS: dict[type, dict[str, Any]] = {}  # each record's hints, resolved once


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


def _check(value: Any, hint: Any, name: str) -> Any:
    """`value` as the hint says (a wire list as a tuple, a record from its dict), or BadMessage."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        given = [a for a in args if a is not type(None)]
        if value is not None and len(given) == 1:  # X | None: what is wrong with it as an X
            return _check(value, given[0], name)
        for arm in args:
            try:
                return _check(value, arm, name)
            except BadMessage:
                pass
    elif origin is tuple:  # a list on the wire (the protocol keeps tuples apart: none are sent)
        fixed = args[-1] is not Ellipsis  # tuple[float, float]: that many, each of its type
        if isinstance(value, (list, tuple)) and (not fixed or len(value) == len(args)):
            return tuple(_check(v, args[i] if fixed else args[0], f"{name}[{i}]") for i, v in enumerate(value))
    elif origin is dict:
        if isinstance(value, dict):
            return {_check(k, args[0], f"a key of {name}"): _check(v, args[1], f"{name}[{k!r}]")
                    for k, v in value.items()}
    elif isinstance(hint, type) and issubclass(hint, Record):
        if isinstance(value, dict):
            try:
                return hint.from_wire(value)
            except BadMessage as e:
                raise BadMessage(f"{name}: {e}") from None
    elif _is(value, hint):
        return value
    raise BadMessage(f"{name!r} is {_kind(value)}, not {_name(hint)}")


def _is(value: Any, hint: Any) -> bool:
    if hint is type(None):
        return value is None
    if isinstance(value, bool):  # a bool is an int to Python, never on the wire
        return hint is bool
    if hint is float:
        return isinstance(value, (int, float))
    return isinstance(value, hint)


def _wire(value: Any, hint: Any) -> Any:
    if isinstance(value, Record):
        return value.to_wire()
    if isinstance(value, tuple) and _declares_tuple(hint):
        inner = next(get_args(a)[0] for a in (hint, *get_args(hint)) if get_origin(a) is tuple)
        return [_wire(v, inner) for v in value]
    return value


def _declares_tuple(hint: Any) -> bool:
    return get_origin(hint) is tuple or any(get_origin(a) is tuple for a in get_args(hint))


def _kind(value: Any) -> str:
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _name(hint: Any) -> str:
    if get_origin(hint) in (Union, types.UnionType):
        return " | ".join(_name(a) for a in get_args(hint))
    return "None" if hint is type(None) else getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


