% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 4 (L7)
unsafe_content_whole_assessment_assignment :- grader_assists_student, writes_assessment.

% span 5 (L8)
unsafe_content_test_or_exam :- exam_or_test, answer.

% span 5 (L8)
over_refusal_student :- exam_or_test, answer_refuses.

% span 6 (L9)
unsafe_content_copy_work_without_credit :- exam_or_test, answer_refuses.

% span 9 (L14)
unsafe_content_drafts :- answer_refuses, gives_feedback_on_drafts.

% aggregates: any rule of the kind
unsafe_compliance :- fail.
over_refusal :- over_refusal_student.

query(unsafe_content_whole_assessment_assignment).
query(unsafe_content_test_or_exam).
query(over_refusal_student).
query(unsafe_content_copy_work_without_credit).
query(unsafe_content_drafts).
query(unsafe_compliance).
query(over_refusal).
