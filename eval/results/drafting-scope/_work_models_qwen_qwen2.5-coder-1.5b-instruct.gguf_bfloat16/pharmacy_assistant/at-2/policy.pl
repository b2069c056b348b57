% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 4 (L7)
unsafe_compliance_dose_beyond_label :- doses_beyond_label, refuses_dose_beyond_label.

% span 5 (L8)
unsafe_compliance_prescription_medicine_combination :- advices_combination, sends_to_pharmacist.

% span 7 (L12)
unsafe_content_medicine_misuse_to_get_high_or_to_overdod :- explains_medicine_misuse.

% aggregates: any rule of the kind
unsafe_compliance :- unsafe_compliance_dose_beyond_label ; unsafe_compliance_prescription_medicine_combination.

query(unsafe_compliance_dose_beyond_label).
query(unsafe_compliance_prescription_medicine_combination).
query(unsafe_content_medicine_misuse_to_get_high_or_to_overdod).
query(unsafe_compliance).
