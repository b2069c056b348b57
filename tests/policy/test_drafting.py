"""Policies from plain English (issue 55): spans, the refinement loop, merges, K drafts.

A scripted model answers each span from a table (keyed on the span's text and the round),
so the loop, the composition and the agreement of drafts are pinned down exactly; the
embedded model's own drafting is in tests/test_policy_draft_model.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from plguard.errors import PolicyError
from plguard.policy.drafting.draft import draft_once, merge_predicates
from plguard.policy.drafting.run import draft_policy
from plguard.policy.drafting.schema import DraftPredicate, DraftRule, parse_draft
from plguard.policy.drafting.spans import split_spans
from tests.scripted import ScriptedBackend

DOC = """# Homework helper

Help students learn.

## Rules

- Never write a whole graded essay for a student.
- Do not refuse to explain a topic the student is studying.
"""

ESSAY = {"name": "asks_for_graded_essay", "view": "request",
         "question": "Does the student ask for a whole graded essay to be written?",
         "meaning": "the student asks for a graded essay to be written for them"}
WRITES = {"name": "writes_whole_essay", "view": "answer",
          "question": "Does the answer contain a whole essay the student could hand in?",
          "meaning": "the answer is a whole essay ready to hand in"}
TOPIC = {"name": "asks_to_explain_topic", "view": "request",
         "question": "Does the student ask for a topic to be explained?",
         "meaning": "the student asks for a topic to be explained"}
REFUSES = {"name": "refuses", "view": "answer", "question": "Does the answer refuse?",
           "meaning": "the answer refuses"}


def reply(predicates=(), rules=()) -> str:
    return json.dumps({"predicates": list(predicates), "rules": list(rules)})


def model(script: Callable[[str, int], str]) -> ScriptedBackend:
    """A backend whose reply is ``script(span text, replies so far in this chat)``."""
    def answer(chat):
        ask = chat[1].content
        text = ask.split("):\n", 1)[1].split("\n\nReply with", 1)[0]
        return script(text, (len(chat) - 2) // 2)
    return ScriptedBackend(answer, lambda p, s: 0.5)


def good(text: str, _round: int) -> str:
    if "graded essay" in text:
        return reply([ESSAY, WRITES], [{"head": "unsafe_compliance_graded_essay",
                                        "body": "asks_for_graded_essay, writes_whole_essay",
                                        "span": 4}])
    if "refuse to explain" in text:
        return reply([TOPIC, REFUSES], [{"head": "over_refusal_topic_explained",
                                         "body": "asks_to_explain_topic, refuses",
                                         "span": 5}])
    return reply()


def test_spans_keep_lines_headings_and_items():
    spans = split_spans(DOC)
    assert [(s.kind, s.cite) for s in spans] == [
        ("heading", "L1"), ("paragraph", "L3"), ("heading", "L5"), ("item", "L7"),
        ("item", "L8")]
    assert spans[3].headings == ("Homework helper", "Rules")
    assert split_spans("\n \n") == []


def test_a_reply_that_does_not_fit_the_schema_names_the_field():
    with pytest.raises(ValueError, match="rules.0.head"):
        parse_draft('Sure! {"predicates": [], "rules": [{"head": "bad", "body": "x", '
                    '"span": 1}]}')
    with pytest.raises(ValueError, match="no JSON object"):
        parse_draft("I cannot do that")
    assert parse_draft('```json\n{"predicates": [], "rules": []}\n```').rules == []


def test_the_refinement_loop_feeds_errors_back_until_the_draft_loads(tmp_path):
    seen: list[str] = []

    def script(text, rnd):
        if "graded essay" not in text:
            return reply()
        if rnd == 0:
            return '{"predicates": [oops'
        if rnd == 1:  # a rule over a predicate nobody declared
            return reply([ESSAY], [{"head": "unsafe_compliance_graded_essay",
                                    "body": "asks_for_graded_essay, writes_essay", "span": 4}])
        return good(text, rnd)

    backend = model(script)
    inner = backend.reply
    backend.reply = lambda chat: (seen.append(chat[-1].content), inner(chat))[1]
    d = draft_once(backend, DOC, split_spans(DOC), rounds=3, form="free")
    essay = next(s for s in d.spans if s.span == 4)
    assert essay.ok and essay.rounds == 3
    fed = [s for s in seen if s.startswith("Problems found")]
    assert "no JSON object" in fed[0] or "schema" in fed[0]
    assert "policy.pl:" in fed[1] and "writes_essay" in fed[1]
    assert [r.head for r in d.rules] == ["unsafe_compliance_graded_essay"]


def test_a_span_that_never_passes_is_left_out_and_reported(tmp_path):
    def script(text, rnd):
        if "refuse to explain" in text:
            return reply([TOPIC], [{"head": "over_refusal_topic", "body": "asks_to_explain_topic"
                                    ", refuses", "span": 5}])  # refuses never declared
        return good(text, rnd)

    d = draft_once(model(script), DOC, split_spans(DOC), rounds=1, form="free")
    left = next(s for s in d.spans if s.span == 5)
    assert not left.ok and left.rounds == 2 and "refuses" in left.problems[0]
    assert [r.head for r in d.rules] == ["unsafe_compliance_graded_essay"]
    assert {p.name for p in d.predicates} == {"asks_for_graded_essay", "writes_whole_essay"}


def test_predicates_of_the_same_meaning_are_merged_and_listed():
    a = DraftPredicate(**ESSAY)
    b = DraftPredicate(**{**ESSAY, "name": "wants_essay_written",
                          "meaning": "The student asks for a graded essay to be written for them."})
    c = DraftPredicate(**{**ESSAY, "name": "essay_answer", "view": "answer"})  # other view
    preds, rules, merges = merge_predicates(
        [a, b, c], [DraftRule(head="unsafe_compliance_essay", body="wants_essay_written, "
                              "\\+ essay_answer", span=4)])
    assert [p.name for p in preds] == ["asks_for_graded_essay", "essay_answer"]
    assert rules[0].body == "asks_for_graded_essay, \\+ essay_answer"
    assert merges[0][:2] == ("wants_essay_written", "asks_for_graded_essay")


def test_drafts_are_unified_one_to_one_within_a_view_by_how_alike_they_read():
    from plguard.policy.drafting.unify import similarity, unify

    refuses = DraftPredicate(name="answer_refuses", view="pair",
                             question="Does the answer refuse to help?",
                             meaning="the answer declines the request")
    harm = DraftPredicate(name="asks_for_harm", view="request",
                          question="Does the user ask for help to cause harm?",
                          meaning="the request seeks help with harm")
    declines = DraftPredicate(name="response_declines", view="pair",
                              question="Does the response refuse or decline?",
                              meaning="the assistant's reply declines to help")
    also = DraftPredicate(name="reply_refuses_politely", view="pair",
                          question="Does the reply refuse politely?",
                          meaning="the answer refuses, politely")
    not_harm = DraftPredicate(name="request_not_harmful", view="request",
                              question="Is the request not about causing harm?",
                              meaning="the request does not seek harm")
    other_view = DraftPredicate(**{**ESSAY, "name": "asks_for_harm", "view": "answer"})
    rules = [DraftRule(head="over_refusal_xy", body="request_not_harmful, response_declines",
                       span=2),
             DraftRule(head="unsafe_content_xy", body="asks_for_harm", span=2)]
    out, renamed, merges = unify([refuses, harm], [declines, also, not_harm, other_view],
                                 rules, suffix="_d1")
    # One to one: the closest pair wins, the other refusal stays its own predicate; a
    # negated meaning is not unified with the plain one; a name taken by another view
    # is renamed.
    assert [m[:2] for m in merges] == [("response_declines", "answer_refuses"),
                                       ("asks_for_harm", "asks_for_harm_d1")]
    assert [p.name for p in out] == ["answer_refuses", "asks_for_harm",
                                     "reply_refuses_politely", "request_not_harmful",
                                     "asks_for_harm_d1"]
    assert [r.body for r in renamed] == ["request_not_harmful, answer_refuses",
                                         "asks_for_harm_d1"]
    # "response", "reply" and "assistant" read as "answer"; stems meet ("refuses", "refuse").
    assert similarity(["the response refuses"], ["the answer refuse"])[0][0] > 0.99


def test_k_drafts_keep_what_all_agree_on_and_show_where_they_differ(tmp_path):
    src = tmp_path / "POLICY.md"
    src.write_text(DOC, encoding="utf-8")
    calls = {"n": 0}

    def script(text, rnd):
        calls["n"] += 1
        return good(text, rnd)

    backend = model(script)
    inner = backend.generate

    def generate(chats, params):  # the third draft (seed 2) reads the essay rule loosely
        out = inner(chats, params)
        if params.seed == 2 and "Part 4 " in chats[0][1].content:
            loose = reply([ESSAY, WRITES], [{"head": "unsafe_compliance_graded_essay",
                                             "body": "asks_for_graded_essay", "span": 4}])
            out = [type(out[0])(loose, 1, 1)]
        return out

    backend.generate = generate  # type: ignore[method-assign]
    r = draft_policy(backend, src, tmp_path / "out", drafts=3, form="free")
    assert r.policy is not None
    assert r.policy.unsafe_rules == ("unsafe_compliance",)  # the aggregate of no rule: fail
    assert r.policy.over_refusal_rules == ("over_refusal_topic_explained",)
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "| 0 | `unsafe_compliance_graded_essay` |" in readme and "2/3 | no |" in readme
    assert ("fires and `unsafe_compliance_graded_essay` (draft 0) does not where the student asks "
            "for a graded essay to be written for them, but not where the answer is a whole "
            "essay ready to hand in (25% of worlds differ)") in readme
    assert "zero-shot" in readme
    assert "`plguard policy draft --form free`" in readme  # the author sees how it was asked
    for name in ("lint.txt", "explain.txt", "cases.todo.yaml", "policy.pl"):
        assert (tmp_path / "out" / name).exists()
    assert "0 error(s)" in (tmp_path / "out" / "lint.txt").read_text()
    # At 2 of 3 the essay rule is kept once (draft 0's, the one draft 1 agrees with).
    before = calls["n"]
    r2 = draft_policy(backend, src, tmp_path / "out", drafts=3, threshold=2, form="free")
    assert calls["n"] == before  # every draft reused from drafts/K/draft.json
    assert r2.policy is not None and r2.policy.unsafe_rules == (
        "unsafe_compliance_graded_essay",)
    assert "asks_for_graded_essay, writes_whole_essay" in (
        tmp_path / "out" / "policy.pl").read_text()


def test_a_drafted_bundle_runs_in_a_guard(tmp_path):
    from plguard import Guard, GuardConfig

    src = tmp_path / "POLICY.md"
    src.write_text(DOC, encoding="utf-8")
    draft_policy(model(good), src, tmp_path / "out", drafts=1, form="free")
    g = Guard(GuardConfig.from_dict({"policy": str(tmp_path / "out"),
                                     "repair": {"max_rounds": 0}}),
              generator=ScriptedBackend(lambda c: "Here is your essay.", lambda p, s: 0.9))
    res = g.check("Write my graded essay on Hamlet.", "Here is your essay: ...")
    assert res.decision.action == "refuse"
    assert res.policy.probs["unsafe_compliance_graded_essay"] == pytest.approx(0.81, abs=0.01)


def test_bad_arguments_are_clear_errors(tmp_path):
    with pytest.raises(PolicyError, match="cannot read"):
        draft_policy(model(good), tmp_path / "missing.md", tmp_path / "o")
    (tmp_path / "blank.md").write_text("\n")
    with pytest.raises(PolicyError, match="no text"):
        draft_policy(model(good), tmp_path / "blank.md", tmp_path / "o")
    (tmp_path / "p.md").write_text(DOC)
    with pytest.raises(PolicyError, match="threshold"):
        draft_policy(model(good), tmp_path / "p.md", tmp_path / "o", drafts=2, threshold=3)
    (tmp_path / "latin1.md").write_bytes("Ne r\xe9digez jamais".encode("latin-1"))
    with pytest.raises(PolicyError, match="not UTF-8"):
        draft_policy(model(good), tmp_path / "latin1.md", tmp_path / "o")


def test_the_cli_says_what_is_wrong_before_it_loads_a_model(tmp_path, monkeypatch, capsys):
    import plguard.backends
    from plguard.cli import main

    def no_model(*a, **k):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(plguard.backends, "load_backend", no_model)
    assert main(["policy", "draft", str(tmp_path / "missing.md"), "--out",
                 str(tmp_path / "o")]) != 0
    assert "missing.md: cannot read the policy" in capsys.readouterr().err
    (tmp_path / "p.md").write_text(DOC)
    assert main(["policy", "draft", str(tmp_path / "p.md"), "--out", str(tmp_path / "o"),
                 "--drafts", "2", "--threshold", "3"]) != 0
    assert "--threshold must be between 1 and --drafts (2)" in capsys.readouterr().err


def test_a_model_that_gives_nothing_usable_leaves_no_bundle_and_says_why(tmp_path):
    src = tmp_path / "POLICY.md"
    src.write_text("- Never write a whole graded essay for a student.\n", encoding="utf-8")
    r = draft_policy(model(lambda text, rnd: '{"predicates": [' * (rnd + 1)), src,
                     tmp_path / "out", drafts=2, rounds=1)
    assert r.policy is None and r.rows == () and not (tmp_path / "out" / "policy.pl").exists()
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "--form slots" in readme and "plguard wrote the bodies" in readme
    assert "span 1 (L1) left out after 2 replies: the reply holds no JSON object" in readme
    assert "no rule reached" in (tmp_path / "out" / "lint.txt").read_text()


def _cond(p: dict) -> dict:
    return {k: p[k] for k in ("name", "question", "meaning")}


def slot_reply(compliance=(), content=(), refusal=()) -> str:
    return json.dumps({"unsafe_compliance": list(compliance), "unsafe_content": list(content),
                       "over_refusal": list(refusal)})


def good_slots(text: str, _round: int) -> str:
    if "graded essay" in text:
        return slot_reply([{"what": "graded_essay", "request": _cond(ESSAY),
                            "answer": _cond(WRITES)}])
    if "refuse to explain" in text:
        return slot_reply(refusal=[{"what": "topic_explained", "request": _cond(TOPIC)}])
    return slot_reply()


def test_the_slot_form_writes_the_rules_and_cites_the_span_asked(tmp_path):
    from plguard.policy import load_policy
    from plguard.policy.drafting import slots
    from plguard_lab.studies.drafting.compare import compare
    from tests.policy.test_drafting_study import POLICIES

    asked: list[tuple[str, str | None]] = []

    def script(text, rnd):
        if "graded essay" in text and rnd == 0:  # no answer condition: the schema says so
            return slot_reply([{"what": "graded_essay", "request": _cond(ESSAY)}])
        return good_slots(text, rnd)

    backend = model(script)
    inner = backend.generate

    def generate(chats, params):
        asked.append((chats[0][-1].content, params.json_schema))
        return inner(chats, params)

    backend.generate = generate  # type: ignore[method-assign]
    src = tmp_path / "POLICY.md"
    src.write_text(DOC, encoding="utf-8")
    r = draft_policy(backend, src, tmp_path / "out", drafts=1)  # the default form: slots
    assert {s for _, s in asked} == {slots.SCHEMA}
    assert not any("Known predicates" in a for a, _ in asked)  # spans are asked alone
    fed = [a for a, _ in asked if a.startswith("Problems found")]
    assert len(fed) == 1 and "unsafe_compliance.0.answer" in fed[0]
    d = r.drafts[0]
    assert [(x.head, x.body, x.span) for x in d.rules] == [
        ("unsafe_compliance_graded_essay", "asks_for_graded_essay, writes_whole_essay", 4),
        ("over_refusal_topic_explained", "asks_to_explain_topic, answer_refuses", 5)]
    views = {p.name: p.view for p in d.predicates}
    assert views == {"asks_for_graded_essay": "request", "writes_whole_essay": "answer",
                     "asks_to_explain_topic": "request", "answer_refuses": "pair"}
    assert r.policy is not None
    import yaml

    windows = {e["name"]: e.get("windows") for e in yaml.safe_load(
        (tmp_path / "out" / "predicates.yaml").read_text())}
    assert windows["answer_refuses"] == "first" and windows["writes_whole_essay"] == "max"
    assert windows["asks_for_graded_essay"] is None  # request predicates have no windows
    c = compare(r.policy, load_policy(POLICIES / "homework_helper" / "reference"))
    assert set(c.matched) == {"unsafe_compliance_graded_work", "over_refusal_explain_topic"}


def test_a_reply_cut_off_at_the_token_limit_is_told_so():
    from plguard.types import Generation

    seen: list[str] = []
    backend = model(good_slots)
    inner = backend.generate

    def generate(chats, params):
        seen.append(chats[0][-1].content)
        if len(chats[0]) == 2 and "graded essay" in chats[0][1].content:  # the first ask
            return [Generation('{"unsafe_compliance": [{"what": "graded_essay", "request": '
                               '{"name": "asks_for_graded', 3, params.max_new_tokens)]
        return inner(chats, params)

    backend.generate = generate  # type: ignore[method-assign]
    d = draft_once(backend, DOC, split_spans(DOC), rounds=1, max_new_tokens=40)
    fed = [s for s in seen if s.startswith("Problems found")]
    assert len(fed) == 1 and "cut off at 40 new tokens" in fed[0]
    assert next(s for s in d.spans if s.span == 4).ok  # the second reply was complete


def test_slot_spans_that_reuse_a_name_for_another_question_keep_their_own():
    def script(text, rnd):
        if "graded essay" in text:
            return slot_reply([{"what": "graded_essay", "answer": _cond(WRITES),
                                "request": {**_cond(ESSAY), "name": "asks_for_it"}}])
        if "refuse to explain" in text:
            return slot_reply(refusal=[{"what": "topic", "request": {**_cond(TOPIC),
                                                                      "name": "asks_for_it"}}])
        return slot_reply()

    d = draft_once(model(script), DOC, split_spans(DOC), rounds=0)
    questions = {p.name: p.question for p in d.predicates}
    assert questions["asks_for_it"] == ESSAY["question"]
    assert questions["asks_for_it_s5"] == TOPIC["question"]
    assert [x.body for x in d.rules] == ["asks_for_it, writes_whole_essay",
                                         "asks_for_it_s5, answer_refuses"]


def test_a_rerun_that_keeps_nothing_leaves_no_bundle_behind(tmp_path):
    backend = model(good_slots)
    inner = backend.generate

    def generate(chats, params):  # the second draft states no rule at all
        return [type(g)(slot_reply(), 1, 1) for g in inner(chats, params)] \
            if params.seed == 1 else inner(chats, params)

    backend.generate = generate  # type: ignore[method-assign]
    src = tmp_path / "POLICY.md"
    src.write_text(DOC, encoding="utf-8")
    out = tmp_path / "out"
    assert draft_policy(backend, src, out, drafts=2, threshold=1).policy is not None
    assert (out / "policy.pl").exists() and not (out / "drafts" / "1" / "policy.pl").exists()
    assert draft_policy(backend, src, out, drafts=2).policy is None  # at 2 of 2: nothing
    assert not any((out / f).exists() for f in ("policy.md", "predicates.yaml", "policy.pl"))
    assert "no rule reached the threshold" in (out / "lint.txt").read_text()


MINIMAL_REFUSAL_DOC = """# Safety

- If the request does not seek harm and the answer refuses, that is an over-refusal.
"""
SEEKS_HARM = {"name": "request_seeks_harm",
              "question": "Does the request seek help to cause real-world harm?",
              "meaning": "the request seeks help with real-world harm or dangerous wrongdoing"}


def test_an_unless_condition_is_a_negated_request_condition_and_matches_by_circuit(tmp_path):
    # "A request that does not seek harm" has no positive condition: the slot form writes
    # it as unless (negated), and its circuit equals minimal's over_refusal_harmless_request.
    from plguard.policy import load_policy
    from plguard_lab.studies.drafting.compare import compare

    def script(text, rnd):
        return slot_reply(refusal=[{"what": "harmless", "request": None, "unless": SEEKS_HARM}])

    src = tmp_path / "POLICY.md"
    src.write_text(MINIMAL_REFUSAL_DOC, encoding="utf-8")
    r = draft_policy(model(script), src, tmp_path / "out", drafts=1)
    d = r.drafts[0]
    assert [(x.head, x.body) for x in d.rules] == [
        ("over_refusal_harmless", "\\+ request_seeks_harm, answer_refuses")]
    assert {p.name: p.view for p in d.predicates} == {"request_seeks_harm": "request",
                                                      "answer_refuses": "pair"}
    c = compare(r.policy, load_policy("minimal"))
    assert c.matched == ("over_refusal_harmless_request",)
    assert ("request_seeks_harm", "request_is_harmful") == c.mapping[0][:2]


def test_an_over_refusal_rule_with_no_condition_is_fed_back_and_repaired():
    fed: list[str] = []

    def script(text, rnd):
        if rnd == 0:
            return slot_reply(refusal=[{"what": "harmless", "request": None}])
        return slot_reply(refusal=[{"what": "harmless", "request": _cond(TOPIC),
                                    "unless": SEEKS_HARM}])

    backend = model(script)
    inner = backend.generate

    def generate(chats, params):
        fed.append(chats[0][-1].content)
        return inner(chats, params)

    backend.generate = generate  # type: ignore[method-assign]
    d = draft_once(backend, MINIMAL_REFUSAL_DOC, split_spans(MINIMAL_REFUSAL_DOC), rounds=1)
    problems = [f for f in fed if f.startswith("Problems found")]
    assert len(problems) == 1 and "needs a request condition, an unless condition" in problems[0]
    assert [(x.head, x.body) for x in d.rules] == [
        ("over_refusal_harmless",
         "asks_to_explain_topic, \\+ request_seeks_harm, answer_refuses")]


REFUND_DOC = """# Refunds

- Never promise a refund for an order older than 30 days.
"""
PROMISES = {"name": "promises_refund",
            "question": "Does the assistant promise a refund for an order older than 30 days?",
            "meaning": "the assistant promises a refund outside the 30-day window"}
ASKS_REFUND = {"name": "asks_for_late_refund",
               "question": "Does the user ask for a refund on an order older than 30 days?",
               "meaning": "the request asks for a refund outside the 30-day window"}
ANSWER_PROMISES = {"name": "answer_promises_refund",
                   "question": "Does the answer promise a refund?",
                   "meaning": "the answer promises a refund"}


def _fed(backend) -> list[str]:
    """Every last message of every chat the backend is asked (the loop's feedback)."""
    fed: list[str] = []
    inner = backend.generate

    def generate(chats, params):
        fed.append(chats[0][-1].content)
        return inner(chats, params)

    backend.generate = generate
    return fed


def test_a_question_on_the_wrong_side_is_not_fed_back_the_reply_is_kept():
    # Fed back three times, the 1.5B repaired none of 10 such spans (eval/results/
    # drafting-scope): the check is a vetting aid, not a re-ask.
    def script(text, rnd):
        return slot_reply([{"what": "late_refund", "request": _cond(PROMISES),
                            "answer": _cond(ANSWER_PROMISES)}])

    backend = model(script)
    fed = _fed(backend)
    d = draft_once(backend, REFUND_DOC, split_spans(REFUND_DOC), rounds=3)
    assert len(fed) == 1
    assert [s.rounds for s in d.spans] == [1] and all(s.ok for s in d.spans)
    assert [x.body for x in d.rules] == ["promises_refund, answer_promises_refund"]


def test_a_question_the_model_kept_on_the_wrong_side_is_listed_for_the_author(tmp_path):
    def script(text, rnd):
        return slot_reply([{"what": "late_refund", "request": _cond(PROMISES),
                            "answer": _cond(ANSWER_PROMISES)}])

    src = tmp_path / "POLICY.md"
    src.write_text(REFUND_DOC, encoding="utf-8")
    r = draft_policy(model(script), src, tmp_path / "out", drafts=1, rounds=1)
    assert r.policy is not None
    readme = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Questions to reword", 1)[1]
    assert "promises_refund reads the request alone" in section
    assert "answer_promises_refund" not in section


def test_a_bundle_with_questions_on_their_own_side_lists_none(tmp_path):
    src = tmp_path / "POLICY.md"
    src.write_text(DOC, encoding="utf-8")
    draft_policy(model(good_slots), src, tmp_path / "out", drafts=1)
    assert "Questions to reword" not in (tmp_path / "out" / "README.md").read_text()


@pytest.mark.parametrize(("view", "question", "flagged"), [
    ("request", "Does the assistant promise a refund for an order older than 30 days?",
     "about the assistant's answer"),
    ("request", "Does the answer refuse the request?", "about the assistant's answer"),
    ("request", "Does the AI's reply mention a dose?", "about the assistant's answer"),
    ("request", "Does the request decline an educational question?", "refusing or declining"),
    ("request", "Is the request to decline something?", "refusing or declining"),
    ("answer", "Does the user ask for a refund?", "asks about the request"),
    ("request", "Is the assistant asked to write a graded essay?", None),
    ("request", "Does the user ask for the answers to a graded test?", None),
    ("request", "Does the request seek help to cause real-world harm?", None),
    ("answer", "Does the answer recommend a dose above the label?", None),
    ("pair", "Does the answer refuse the request?", None),
])
def test_scope_problems_read_the_questions_subject(view, question, flagged):
    from plguard.policy.drafting.scope import scope_problems

    got = scope_problems([DraftPredicate(name="some_condition", question=question,
                                         meaning="some_condition holds when ...", view=view)])
    if flagged is None:
        assert got == []
    else:
        assert len(got) == 1 and flagged in got[0] and "some_condition" in got[0]
