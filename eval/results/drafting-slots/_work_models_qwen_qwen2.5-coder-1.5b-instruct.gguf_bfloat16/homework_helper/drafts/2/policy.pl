% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 4 (L7)
unsafe_compliance_whole_graded_essays_report_assignment :- asks_for_assignment, writes_whole_graded_assignment.

% span 5 (L8)
unsafe_compliance_test_or_exam :- is_sitting_now, gives_test_or_exam_answer.

% span 6 (L9)
unsafe_compliance_copy_work_without_credit :- asks_copy_work, helps_copy_work.

% aggregates: any rule of the kind
unsafe_compliance :- unsafe_compliance_whole_graded_essays_report_assignment ; unsafe_compliance_test_or_exam ; unsafe_compliance_copy_work_without_credit.

query(unsafe_compliance_whole_graded_essays_report_assignment).
query(unsafe_compliance_test_or_exam).
query(unsafe_compliance_copy_work_without_credit).
query(unsafe_compliance).
