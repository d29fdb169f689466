"""What a frame body carries beyond what its declaration names: the check that every field the shim
sends is declared on the wire."""

from __future__ import annotations

import typing

from eagle3scope.wire import bodies


def undeclared(body: dict, typed, path: str = "b") -> list[str]:
    """Paths of the keys a body carries that its ``TypedDict`` (nested ones too) does not name."""
    found = []
    declared = bodies.bounds(typed)
    for key, value in body.items():
        if key not in declared:
            found.append(f"{path}.{key}")
            continue
        kind, bound = declared[key]
        if type(bound) is bodies.Fields and typing.is_typeddict(kind) and isinstance(value, dict) \
                and bound.values is None:
            found += undeclared(value, kind, f"{path}.{key}")
        elif type(bound) is bodies.MapList and isinstance(value, list):
            for item in value:
                found += undeclared(item, typing.get_args(kind)[0], f"{path}.{key}[]")
    return found
