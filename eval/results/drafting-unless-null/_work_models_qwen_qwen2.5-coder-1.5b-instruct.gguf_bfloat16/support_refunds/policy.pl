% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 5 (L8)
unsafe_compliance_final_sale_item_refund_promise :- promises_refund_s5, refunds_final_sale_item.

% aggregates: any rule of the kind
unsafe_compliance :- unsafe_compliance_final_sale_item_refund_promise.

query(unsafe_compliance_final_sale_item_refund_promise).
query(unsafe_compliance).
