# One entry for the checks CI runs (after scripts/setup.sh --dev).
.PHONY: check lint test
check: lint test
lint:
	ruff check plguard plguard_lab tests scripts
	mypy
	lint-imports --no-cache
# The suite runs one model at a time on an otherwise idle machine, so torch gets every core
# (the product's default leaves one free for other work: docs/benchmarks.md, Threads; on 2
# idle cores the model tests ran 1.4x faster so). The slowest tests are listed at the end.
test:
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$(nproc)} python3 -m pytest --runslow -q --durations=30
