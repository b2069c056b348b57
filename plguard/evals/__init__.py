"""Offline evaluation on XSTest: data, methods, evaluators, metrics, runner and reports.

Submodules are imported on use (``plguard.evals.runner`` and friends); importing this
package loads nothing heavy.
"""
