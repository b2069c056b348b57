"""Shared helpers of the policy tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from plguard.policy import bundle_names, load_policy

BUNDLES = bundle_names()


def make_bundle(folder: Path, predicates: dict[str, str], program: str,
                cases: str | None = None) -> Path:
    """Write a small bundle: predicates maps name -> scope."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "policy.md").write_text("# test policy\n")
    (folder / "predicates.yaml").write_text(yaml.safe_dump([
        {"name": n, "scope": s, "question": f"Is {n} true?", "description": f"{n} holds"}
        for n, s in predicates.items()]))
    (folder / "policy.pl").write_text(program)
    if cases is not None:
        (folder / "cases.yaml").write_text(cases)
    return folder


def copy_bundle(name: str, dest: Path) -> Path:
    """Copy a bundled policy to ``dest`` (to edit it in a test)."""
    shutil.copytree(load_policy(name).path, dest)
    return dest
