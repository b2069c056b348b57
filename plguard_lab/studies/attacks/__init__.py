"""The attack suite: named transforms of (request, response) pairs against the guard.

``plguard eval attacks`` guards each pair of the suite clean and under every attack and
reports how detection and each predicate's P(True) move. See docs/attacks.md.
"""

from plguard_lab.studies.attacks.report import AttackRow, summarise, write_report
from plguard_lab.studies.attacks.runner import AttackRun, AttackSummary, run_attacks
from plguard_lab.studies.attacks.suite import Pair, Suite, load_suite
from plguard_lab.studies.attacks.transforms import ATTACKS, FAMILIES, Attack, Attacked, Context

__all__ = [
    "ATTACKS",
    "FAMILIES",
    "Attack",
    "AttackRow",
    "AttackRun",
    "AttackSummary",
    "Attacked",
    "Context",
    "Pair",
    "Suite",
    "load_suite",
    "run_attacks",
    "summarise",
    "write_report",
]
