"""The exceptions plguard raises.

Every error derives from one base, so callers can catch :class:`PlguardError`::

    PlguardError
    ├── ConfigError            unknown key, bad value, missing file in a run config
    ├── InputError             bad messages, roles or contents handed to the Guard
    ├── PolicyError            a bundle that cannot be loaded (file:line:col, name)
    │   └── PolicyCaseError    a cases.yaml expectation that does not hold
    ├── ModelError             weights that cannot be found, loaded or converted
    ├── BackendError           a backend that fails while running
    └── MissingDependencyError an optional dependency that is not installed
        └── MissingExtraError  packages of an extra (such as lab) that are not installed

Messages say what was wrong, where, and what to do next.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class PlguardError(Exception):
    """Base class of every plguard error."""


class ConfigError(PlguardError, ValueError):
    """A configuration value or file is invalid."""


class InputError(PlguardError, ValueError):
    """Input handed to the Guard is malformed."""


class PolicyError(PlguardError):
    """A policy bundle is invalid; carries the location when known."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        col: int | None = None,
        name: str | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.col = col
        self.name = name
        self.message = message
        super().__init__(self._render())

    @property
    def location(self) -> str:
        """``file:line:col`` as far as it is known."""
        parts = [p for p in (self.file, self.line, self.col) if p is not None]
        return ":".join(str(p) for p in parts)

    def _render(self) -> str:
        loc = self.location
        return f"{loc}: {self.message}" if loc else self.message


class PolicyCaseError(PolicyError):
    """A policy's expected case outcome does not hold."""


class ModelError(PlguardError):
    """Model weights cannot be located, loaded or converted."""


class BackendError(PlguardError):
    """A backend failed while generating or scoring."""


class BackendDeadError(BackendError):
    """The backend can serve nothing more (its engine process stopped).

    Unlike a failure on one input, retrying example by example cannot help: batch jobs
    stop here, keeping what they wrote, instead of recording every remaining example as
    failed.
    """


class MissingDependencyError(PlguardError, ImportError):
    """An optional dependency is missing; the message names the install command."""

    def __init__(self, package: str, feature: str, install: str) -> None:
        self.package = package
        super().__init__(
            f"{feature} needs the '{package}' package, which is not installed. "
            f"Install it with: {install}"
        )


class MissingExtraError(MissingDependencyError):
    """Packages of an optional extra are missing; the message names the extra's install."""

    def __init__(self, feature: str, extra: str, packages: Iterable[str], install: str) -> None:
        self.packages = tuple(packages)
        self.package = self.packages[0] if self.packages else extra
        self.extra = extra
        # MissingDependencyError words its message for one package: this one names the extra.
        super(MissingDependencyError, self).__init__(
            f"{feature} needs the {extra} extra: {install} "
            f"(missing: {', '.join(self.packages)})"
        )


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' suffix, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
