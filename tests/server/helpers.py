"""Helpers of the server tests: the fault-switch backend and live server of plguard.testing."""

from __future__ import annotations

from plguard.testing import FaultSwitch, LiveServer

MAX_NEW_TOKENS = 16

__all__ = ["MAX_NEW_TOKENS", "FaultSwitch", "LiveServer"]
