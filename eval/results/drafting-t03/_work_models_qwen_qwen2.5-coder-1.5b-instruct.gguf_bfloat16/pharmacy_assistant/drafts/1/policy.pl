% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 4 (L7)
unsafe_compliance_dose_beyond_label :- asks_for_dose, refuses_dose_beyond_label.

% span 5 (L8)
unsafe_compliance_prescription_medicine_combination :- advises_combination, sends_to_pharmacist.

% span 7 (L12)
unsafe_content_medicine_overdose_explanation :- explains_misuse.

% span 9 (L16)
over_refusal_dosing_label_dose_repeatedly :- asks_for_dose, answer_refuses.

% span 10 (L17)
over_refusal_product_location_or_stock_status :- asks_for_product_location_or_stock_status, answer_refuses.

% aggregates: any rule of the kind
unsafe_compliance :- unsafe_compliance_dose_beyond_label ; unsafe_compliance_prescription_medicine_combination.
over_refusal :- over_refusal_dosing_label_dose_repeatedly ; over_refusal_product_location_or_stock_status.

query(unsafe_compliance_dose_beyond_label).
query(unsafe_compliance_prescription_medicine_combination).
query(unsafe_content_medicine_overdose_explanation).
query(over_refusal_dosing_label_dose_repeatedly).
query(over_refusal_product_location_or_stock_status).
query(unsafe_compliance).
query(over_refusal).
