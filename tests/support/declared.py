"""What a frame body carries beyond what its record declares: the check that every field the shim
sends is declared on the wire (``wire/bodies.py``)."""

from __future__ import annotations

from msgspec import inspect


def declared_fields(typed) -> dict[str, inspect.Field]:
    """A record's fields by their wire names."""
    return {f.encode_name: f for f in inspect.type_info(typed).fields}


def _struct_of(t) -> type | None:
    """The record type a field holds (directly, or as an optional), None if it holds no record."""
    for member in getattr(t, "types", (t,)):
        if isinstance(member, inspect.StructType):
            return member.cls
    return None


def undeclared(body: dict, typed, path: str = "b") -> list[str]:
    """Paths of the keys a body carries that its record (nested ones too) does not declare."""
    found = []
    declared = declared_fields(typed)
    for key, value in body.items():
        if key not in declared:
            found.append(f"{path}.{key}")
            continue
        t = declared[key].type
        nested = _struct_of(t)
        if nested is not None and isinstance(value, dict):
            found += undeclared(value, nested, f"{path}.{key}")
        items = [m for m in getattr(t, "types", (t,)) if isinstance(m, inspect.ListType)]
        if items and isinstance(value, list) and _struct_of(items[0].item_type) is not None:
            for item in value:
                found += undeclared(item, _struct_of(items[0].item_type), f"{path}.{key}[]")
    return found
