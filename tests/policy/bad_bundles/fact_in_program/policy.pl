% A grounded predicate must not be a fact here: the loader injects it.
0.7::request_is_harmful.
unsafe_compliance :- request_is_harmful, response_provides_harmful_instructions.
query(unsafe_compliance).
