"""The unsafe-content study: what the answer-alone rules catch and cost (issue 42)."""
