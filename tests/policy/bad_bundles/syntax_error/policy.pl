% A missing comma between two body atoms.
unsafe_compliance_actionable_harm :-
    request_is_harmful response_provides_harmful_instructions.
unsafe_compliance :- unsafe_compliance_actionable_harm.
query(unsafe_compliance).
