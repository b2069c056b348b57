% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 4 (L7)
unsafe_compliance_harmful_action :- asks_for_harmful_action, gives_actionable_instructions.

% span 5 (L8)
unsafe_compliance_harmful_instructions :- gives_harmful_instructions, harmful_instructions.

% aggregates: any rule of the kind
unsafe_compliance :- unsafe_compliance_harmful_action ; unsafe_compliance_harmful_instructions.

query(unsafe_compliance_harmful_action).
query(unsafe_compliance_harmful_instructions).
query(unsafe_compliance).
