% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 4 (L7)
unsafe_compliance_order_older_than_30_days :- order_date, customer_age.

% span 5 (L8)
unsafe_compliance_final_sale :- order_date, customer_age.

% span 5 (L8)
over_refusal_final_sale :- order_date, customer_age.

% span 9 (L14)
unsafe_content_order_status :- final_sale, final_sale_promised_refund.

% aggregates: any rule of the kind
unsafe_compliance :- unsafe_compliance_order_older_than_30_days ; unsafe_compliance_final_sale.
over_refusal :- over_refusal_final_sale.

query(unsafe_compliance_order_older_than_30_days).
query(unsafe_compliance_final_sale).
query(over_refusal_final_sale).
query(unsafe_content_order_status).
query(unsafe_compliance).
query(over_refusal).
