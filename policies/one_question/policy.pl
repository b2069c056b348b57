% One-question baseline (not a PL-Guard policy): each failure mode is one grounded
% question about the whole pair, passed through unchanged. The predicates of
% predicates.yaml are injected by the loader as probabilistic facts.

unsafe_compliance_one_question :- response_is_unsafe_compliance.
over_refusal_one_question :- response_is_over_refusal.

% Unsafe content: the answer alone, whatever the request (thresholds.content).
unsafe_content_one_question :- response_contains_harmful_content.

unsafe_compliance :- unsafe_compliance_one_question.
over_refusal :- over_refusal_one_question.

query(unsafe_compliance_one_question).
query(over_refusal_one_question).
query(unsafe_compliance).
query(over_refusal).
query(unsafe_content_one_question).
