"""The studies, one folder each, found by name (``plguard eval <name>``, ``STUDIES``).

Each folder holds its runner, its report and a README that says what it measures, how to
run it and where its committed results are. A study imports :mod:`plguard_lab`'s shared
modules and the product, never another study's private helpers.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

# Every study, in the order `plguard eval --help` lists their commands. A study's folder is
# `plguard_lab/studies/<name>/`; one with commands has a `cli` module whose
# `add_commands(eval_sub, groups)` adds them (`groups`: the command groups studies share,
# e.g. `quality`, where the heads study adds `fit-heads`).
STUDIES = ("gold", "quality", "heads", "attacks", "content", "xstest", "hazards", "tuning",
           "read", "drafting")


def study(name: str) -> ModuleType:
    """A study's package, by name."""
    from plguard.errors import ConfigError

    if name not in STUDIES:
        raise ConfigError(f"unknown study {name!r}; the studies are {', '.join(STUDIES)}")
    return importlib.import_module(f"{__name__}.{name}")


def study_cli(name: str) -> ModuleType | None:
    """A study's ``cli`` module, or None for a study without commands of its own."""
    study(name)
    try:
        return importlib.import_module(f"{__name__}.{name}.cli")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}.cli":
            raise
        return None


def add_study_commands(eval_sub: Any) -> None:
    """Every study's ``plguard eval`` commands, found by name."""
    groups: dict[str, Any] = {}
    for name in STUDIES:
        cli = study_cli(name)
        if cli is not None:
            cli.add_commands(eval_sub, groups)


__all__ = ["STUDIES", "add_study_commands", "study", "study_cli"]
