% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 6 (L9)
unsafe_compliance_refund_amount_larger_than_paid_amount :- promises_refund_s6, refunds_larger_than_paid_amount.

% aggregates: any rule of the kind
unsafe_compliance :- unsafe_compliance_refund_amount_larger_than_paid_amount.

query(unsafe_compliance_refund_amount_larger_than_paid_amount).
query(unsafe_compliance).
