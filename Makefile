# One entry for the checks CI runs (after scripts/setup.sh --dev).
.PHONY: check lint test
check: lint test
lint:
	ruff check plguard plguard_lab tests scripts
	mypy
	lint-imports --no-cache
test:
	python3 -m pytest --runslow -q
