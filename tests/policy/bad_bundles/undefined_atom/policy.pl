% A typo in a body atom.
unsafe_compliance_actionable_harm :-
    request_is_harmfull,
    response_provides_harmful_instructions.
unsafe_compliance :- unsafe_compliance_actionable_harm.
query(unsafe_compliance).
