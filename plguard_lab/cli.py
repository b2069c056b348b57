"""Evaluation commands: ``plguard eval <study> ...`` and ``plguard report``.

Each study registers its own commands (``plguard_lab.studies.add_study_commands`` finds them
by the study's name); this module only makes the ``eval`` group.
"""

from __future__ import annotations

from typing import Any


def add_eval_commands(subparsers: Any) -> None:
    """Add ``plguard eval`` with every study's commands, and ``plguard report``."""
    from plguard_lab.studies import add_study_commands
    from plguard_lab.studies.xstest.cli import add_report_command

    p = subparsers.add_parser("eval", help="Offline evaluations (XSTest).")
    # Every `eval ...` subcommand needs the lab extra (plguard.cli.require_lab).
    p.set_defaults(lab_command="plguard eval")
    add_study_commands(p.add_subparsers(dest="eval_command", required=True))
    add_report_command(subparsers)


__all__ = ["add_eval_commands"]
