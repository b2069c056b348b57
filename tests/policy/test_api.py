"""The public surface of plguard.policy."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import plguard.policy as api

MODULES = ["bundle", "cases", "compiled", "core", "diff", "explain", "lint"]


def test_all_is_complete_and_importable():
    assert len(api.__all__) == len(set(api.__all__))
    for name in api.__all__:
        assert hasattr(api, name), name
    for mod_name in MODULES:
        mod = importlib.import_module(f"plguard.policy.{mod_name}")
        for name, obj in vars(mod).items():
            if name.startswith("_") or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if obj.__module__ != mod.__name__:
                continue
            # every public class and the main entry points are re-exported
            if inspect.isclass(obj) or name in {"load_policy", "lint", "diff", "explain"}:
                assert name in api.__all__, f"{mod_name}.{name} missing from __all__"


def test_required_shape():
    policy = api.load_policy("minimal")
    for attr in ("name", "path", "id", "text", "predicates", "queries", "unsafe_rules",
                 "over_refusal_rules", "evaluate", "evaluate_batch", "evaluate_matrix"):
        assert hasattr(policy, attr), attr
    assert policy.text.startswith("# Minimal safety policy")
    assert [p.scope for p in policy.predicates] == ["request", "request", "response",
                                                    "response"]
    assert policy.priors["request_is_harmful"] == 0.45


def test_importing_policy_does_not_import_torch():
    code = "import sys, plguard.policy; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
