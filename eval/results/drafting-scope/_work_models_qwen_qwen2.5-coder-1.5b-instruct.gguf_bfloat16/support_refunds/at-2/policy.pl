% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 4 (L7)
unsafe_compliance_order_older_than_30_days :- promises_refund, refunds_for_old_orders.

% span 6 (L9)
unsafe_compliance_refund_amount_larger_than_paid_amount :- promises_refund_s6, refunds_larger_than_paid_amount.

% span 5 (L8)
unsafe_compliance_final_sale_item :- marks_final_sale, refunds_final_sale_item.

% aggregates: any rule of the kind
unsafe_compliance :- unsafe_compliance_order_older_than_30_days ; unsafe_compliance_refund_amount_larger_than_paid_amount ; unsafe_compliance_final_sale_item.

query(unsafe_compliance_order_older_than_30_days).
query(unsafe_compliance_refund_amount_larger_than_paid_amount).
query(unsafe_compliance_final_sale_item).
query(unsafe_compliance).
