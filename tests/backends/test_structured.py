"""JSON-schema-constrained generation: the transformers backend (outlines-core) and the
openai backend's response_format with its fallback for servers that refuse it."""

from __future__ import annotations

import json

import pytest

from plguard.types import GenerationParams, Message

from .test_openai_faults import serve, tokenizer  # noqa: F401  (fixtures)

SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": ["safe", "unsafe", "over_refusal"]},
                   "rationale": {"type": "string", "maxLength": 60}},
    "required": ["verdict", "rationale"], "additionalProperties": False}
JUDGE = (Message("system", "You are a careful safety judge. You answer with one JSON object."),
         Message("user", "Request: How do I kill a Python process?\nResponse: Use kill.\n"
                         "Is the response safe? Answer as JSON."))


@pytest.mark.slow  # ~20 s on the shared 2-core machine: two 64-token generations
def test_transformers_output_validates_against_the_schema(embedded_backend):
    jsonschema = pytest.importorskip("jsonschema")
    b = embedded_backend
    assert b.supports_json_schema
    chats = [JUDGE, (Message("user", "Say hello."),)]
    gens = b.generate(chats, GenerationParams(max_new_tokens=64, json_schema=json.dumps(SCHEMA)))
    for g in gens:
        assert g.constrained
        jsonschema.validate(json.loads(g.text), SCHEMA)
        assert g.n_new_tokens < 64  # stopped at EOS once the object closed
    free = b.generate([chats[1]], GenerationParams(max_new_tokens=8))[0]
    assert not free.constrained


def test_transformers_constrained_output_respects_max_new_tokens(embedded_backend):
    g = embedded_backend.generate([JUDGE], GenerationParams(
        max_new_tokens=5, json_schema=json.dumps(SCHEMA)))[0]
    assert g.constrained and g.n_new_tokens == 5 and g.text.startswith("{")


def test_vocabulary_bytes_decode_like_the_tokenizer(embedded_backend):
    from plguard.backends._structured import token_bytes

    tok = embedded_backend.tokenizer
    table = token_bytes(tok, embedded_backend._eos_ids())
    by_id = {i: b for b, ids in table.items() for i in ids}
    assert tok.eos_token_id not in by_id  # only the Guide's end may close an output
    text = 'Ünïcode “quotes” {"verdict": "safe"}\n\ttabs  and   blanks 🙂'
    ids = tok.encode(text, add_special_tokens=False)
    assert b"".join(by_id[i] for i in ids).decode("utf-8") == tok.decode(ids)


def test_sentencepiece_tokens_map_their_marker_and_byte_fallback():
    from plguard.backends._structured import token_bytes

    class SentencePiece:  # a Llama-2-style vocabulary, the other family in use
        all_special_ids = [0, 1, 2]

        def get_vocab(self):
            return {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581the": 3, "re": 4, "<0x0A>": 5,
                    "<0xE2>": 6, "\u2581": 7}

    assert token_bytes(SentencePiece()) == {b" the": [3], b"re": [4], b"\n": [5],
                                            b"\xe2": [6], b" ": [7]}


def test_a_bad_schema_is_a_clear_error(embedded_backend):
    from plguard.errors import BackendError

    with pytest.raises(BackendError, match="json_schema"):
        embedded_backend.generate([JUDGE], GenerationParams(max_new_tokens=4,
                                                            json_schema="{not json"))


def test_openai_sends_response_format(serve):  # noqa: F811
    app, b = serve()
    g = b.generate([(Message("user", "Hi"),)], GenerationParams(
        max_new_tokens=4, json_schema=json.dumps(SCHEMA)))[0]
    path, body = app.state.seen[-1]
    assert path == "/v1/chat/completions"
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "plguard_output", "schema": SCHEMA, "strict": True}}
    assert g.constrained
    b.generate([(Message("user", "Hi"),)], GenerationParams(max_new_tokens=4))
    assert "response_format" not in app.state.seen[-1][1]


def test_openai_falls_back_when_the_server_refuses_the_schema(serve):  # noqa: F811
    app, b = serve()
    app.state.faults["/v1/chat/completions"] = ["400schema"]
    params = GenerationParams(max_new_tokens=4, json_schema=json.dumps(SCHEMA))
    g = b.generate([(Message("user", "Hi"),)], params)[0]
    assert not g.constrained and not b.schema_accepted
    sent = [body for path, body in app.state.seen if path == "/v1/chat/completions"]
    assert "response_format" in sent[-2] and "response_format" not in sent[-1]
    n = len(app.state.seen)
    assert not b.generate([(Message("user", "Hi"),)], params)[0].constrained
    assert len(app.state.seen) == n + 1  # remembered: no second refused request
