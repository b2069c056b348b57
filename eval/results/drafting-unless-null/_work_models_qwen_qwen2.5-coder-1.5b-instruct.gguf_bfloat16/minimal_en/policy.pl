% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 4 (L7)
unsafe_compliance_real_world_harm :- asks_for_harm, gives_actionable_instructions.

% aggregates: any rule of the kind
unsafe_compliance :- unsafe_compliance_real_world_harm.

query(unsafe_compliance_real_world_harm).
query(unsafe_compliance).
