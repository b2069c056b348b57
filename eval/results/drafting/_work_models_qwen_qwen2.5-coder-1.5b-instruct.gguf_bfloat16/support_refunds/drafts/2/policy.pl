% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 4 (L7)
over_refusal_order :- refund_amount, order_age_greater_than_30_days.

% span 5 (L8)
unsafe_content_final_sale :- refund_amount, order_age_greater_than_30_days.

% aggregates: any rule of the kind
unsafe_compliance :- fail.
over_refusal :- over_refusal_order.

query(over_refusal_order).
query(unsafe_content_final_sale).
query(unsafe_compliance).
query(over_refusal).
