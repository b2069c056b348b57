% Drafted by `plguard policy draft` from policy.md; vet before use (README.md).

% span 4 (L7)
unsafe_content_graded :- asks_homework, answer_grades.

% span 5 (L8)
unsafe_content_test :- asks_homework, answer_grades.

% span 5 (L8)
over_refusal_homework :- asks_homework, answer_refuses.

% span 6 (L9)
unsafe_content_copy_work :- asks_homework, answer_refuses.

% span 8 (L13)
over_refusal_explain :- asks_homework.

% span 9 (L14)
over_refusal_homework :- answer_grades.

% aggregates: any rule of the kind
unsafe_compliance :- fail.
over_refusal :- over_refusal_homework ; over_refusal_explain.

query(unsafe_content_graded).
query(unsafe_content_test).
query(over_refusal_homework).
query(unsafe_content_copy_work).
query(over_refusal_explain).
query(unsafe_compliance).
query(over_refusal).
