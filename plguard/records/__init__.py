"""Run records shared by ``plguard batch`` and the evaluation studies.

:mod:`~plguard.records.store` (crash-safe JSONL stores, manifests, config checks on
resume) and :mod:`~plguard.records.loop` (the one resumable map loop). Product code and
studies both build on this layer; it imports neither.
"""
