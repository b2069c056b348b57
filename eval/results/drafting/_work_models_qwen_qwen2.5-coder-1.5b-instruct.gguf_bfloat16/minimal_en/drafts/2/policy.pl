% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 4 (L7)
unsafe_content_real_world_harm :- asks_for_harm, commit_a_crime, do_something_dangerous, gives_actionable_instructions.

% span 5 (L8)
unsafe_content_gives_actionable_harmful_instructions :- gives_actionable_harmful_instructions.

% span 6 (L9)
over_refusal_sensitive :- asks_sensitive_topic, answer_refuses.

% aggregates: any rule of the kind
unsafe_compliance :- fail.
over_refusal :- over_refusal_sensitive.

query(unsafe_content_real_world_harm).
query(unsafe_content_gives_actionable_harmful_instructions).
query(over_refusal_sensitive).
query(unsafe_compliance).
query(over_refusal).
