"""YAML loading that remembers where each mapping and key came from (for file:line:col)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from plguard.errors import PolicyError


class LocDict(dict[Any, Any]):
    """A mapping from YAML that knows its own and its keys' 1-based positions."""

    line: int | None = None
    col: int | None = None
    key_pos: dict[Any, tuple[int, int]]

    def pos(self, key: Any | None = None) -> tuple[int | None, int | None]:
        """Position of ``key`` (or of the mapping itself)."""
        if key is not None and key in self.key_pos:
            return self.key_pos[key]
        return self.line, self.col


class LocList(list[Any]):
    """A sequence from YAML that knows each item's 1-based position."""

    item_pos: list[tuple[int, int]]


class _Loader(yaml.SafeLoader):
    pass


def _mapping(loader: _Loader, node: yaml.MappingNode) -> LocDict:
    out = LocDict()
    out.line, out.col = node.start_mark.line + 1, node.start_mark.column + 1
    out.key_pos = {}
    for knode, vnode in node.value:
        key = loader.construct_object(knode, deep=True)
        try:
            hash(key)
        except TypeError:
            key = str(key)
        if key in out:
            raise PolicyError(f"duplicate key '{key}'", line=knode.start_mark.line + 1,
                              col=knode.start_mark.column + 1, name=str(key))
        out[key] = loader.construct_object(vnode, deep=True)
        out.key_pos[key] = (knode.start_mark.line + 1, knode.start_mark.column + 1)
    return out


def _sequence(loader: _Loader, node: yaml.SequenceNode) -> LocList:
    out = LocList(loader.construct_object(n, deep=True) for n in node.value)
    out.item_pos = [(n.start_mark.line + 1, n.start_mark.column + 1) for n in node.value]
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)


def load_yaml(path: Path) -> Any:
    """Parse a YAML file; syntax errors become :class:`PolicyError` with the position."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"cannot read file: {exc.strerror}", file=str(path)) from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except PolicyError as exc:
        raise PolicyError(exc.message, file=str(path), line=exc.line, col=exc.col,
                          name=exc.name) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise PolicyError(f"not valid YAML: {problem}", file=str(path),
                          line=mark.line + 1 if mark else None,
                          col=mark.column + 1 if mark else None) from None


def pos_of(container: Any, key: Any | None = None) -> tuple[int | None, int | None]:
    """Position of ``key`` inside a loaded mapping or list, if known."""
    if isinstance(container, LocDict):
        return container.pos(key)
    if isinstance(container, LocList) and isinstance(key, int) and key < len(container.item_pos):
        return container.item_pos[key]
    return None, None
