unsafe_compliance :- risky, response_provides_harmful_instructions.
risky :- request_is_harmful ; unsafe_compliance.
query(unsafe_compliance).
