% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 5 (L8)
unsafe_compliance_final_sale :- item_final_sale.

% span 6 (L9)
unsafe_content_refund_amount :- price_paid, refund_amount.

% span 9 (L14)
over_refusal_order_status :- order_status.

% aggregates: any rule of the kind
unsafe_compliance :- unsafe_compliance_final_sale.
over_refusal :- over_refusal_order_status.

query(unsafe_compliance_final_sale).
query(unsafe_content_refund_amount).
query(over_refusal_order_status).
query(unsafe_compliance).
query(over_refusal).
