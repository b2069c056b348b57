% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 4 (L7)
unsafe_compliance_old_order_refund_promise :- promises_refund, refunds_for_old_orders.

% span 5 (L8)
unsafe_compliance_final_sale_item :- final_sale_item_refund_promise, refunds_final_sale_item.

% aggregates: any rule of the kind
unsafe_compliance :- unsafe_compliance_old_order_refund_promise ; unsafe_compliance_final_sale_item.

query(unsafe_compliance_old_order_refund_promise).
query(unsafe_compliance_final_sale_item).
query(unsafe_compliance).
