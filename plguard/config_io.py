"""Reading a config: dotted overrides, and validation errors a user can act on.

:class:`plguard.config.GuardConfig` declares the fields (every default, once); this module
only moves mappings around and explains what pydantic rejected, naming the key and, for an
unknown one, the valid keys beside it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from plguard.errors import did_you_mean


def deep_copy(d: dict[str, Any]) -> dict[str, Any]:
    """A copy of nested mappings, so overrides never change the caller's."""
    return {k: deep_copy(v) if isinstance(v, dict) else v for k, v in d.items()}


def set_dotted(data: dict[str, Any], keys: list[str], value: Any) -> None:
    """``data[k1][k2]... = value``, making the mappings on the way."""
    node = data
    for k in keys[:-1]:
        if not isinstance(node.get(k), dict):  # absent or null (server.upstream unset)
            node[k] = {}
        node = node[k]
    node[keys[-1]] = value


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model = root
    for key in loc:
        field = model.model_fields.get(str(key))
        if field is None:
            return None
        ann = field.annotation
        inner = [a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type)]
        sub = next((a for a in inner if issubclass(a, BaseModel)), None)
        if sub is None:
            return None
        model = sub
    return model


def explain(exc: ValidationError, source: str, root: type[BaseModel]) -> str:
    """A validation error as lines naming each bad key, with valid keys for unknown ones."""
    lines = [f"{source}: invalid configuration"]
    for err in exc.errors():
        loc = tuple(err["loc"])
        where = ".".join(str(x) for x in loc)
        if err["type"] == "extra_forbidden":
            parent = _model_at(root, loc[:-1])
            valid = sorted(parent.model_fields) if parent else []
            hint = did_you_mean(str(loc[-1]), valid)
            lines.append(f"  unknown key '{where}'{hint}; valid keys here: {', '.join(valid)}")
        else:
            lines.append(f"  {where}: {err['msg']} (got {err.get('input')!r})")
    return "\n".join(lines)


__all__ = ["deep_copy", "explain", "set_dotted"]
