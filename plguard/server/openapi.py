"""The server's OpenAPI schema: what each route answers, the event stream, the served model.

The running server does not publish it (``openapi_url=None``: a guard in front of an app
exposes only what it serves), but ``app.openapi()`` builds it in-process, and it is the
contract the fuzz tests hold the server to (tests/server/test_fuzz.py, docs/fuzzing.md):
every answer is one of the documented statuses with a body that validates against the
documented schema. FastAPI derives the request and 200 models from the routes; this module
adds what it cannot see:

- every error status a route can give, each with the OpenAI error body (FastAPI would
  document its own ``{"detail": [...]}`` 422, which this server never sends);
- the ``text/event-stream`` answer of ``stream: true``, one event per chunk
  (``itemSchema``), then ``data: [DONE]``;
- the one model name the server accepts (any other gets 404).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plguard.server.schemas import ChatCompletionChunk, ErrorResponse

if TYPE_CHECKING:
    from fastapi import FastAPI

#: Every error status the server gives, and when.
ERRORS: dict[int, str] = {
    400: "The body is not JSON (or not UTF-8), tries to set the policy or thresholds, or "
         "has no user message (moderations: or a text the policy cannot judge without an "
         "answer, having no request-scope predicate).",
    401: "Missing or wrong API key (only when the server was started with one).",
    404: "The model named is not the one this server serves (server.model_name).",
    413: "The body is larger than server.max_body_bytes.",
    422: "A field has the wrong type or value; `param` names it.",
    502: "Upstream mode: the upstream server could not be reached or gave no answer.",
    500: "The guard raised for this request (a bug); the server log has the traceback "
         "under the incident id the message names.",
    503: "The guard's model backend failed while serving this request; retry later.",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route that can answer with ``codes``."""
    return {code: {"model": ErrorResponse, "description": ERRORS[code]} for code in codes}


_REF = "#/components/schemas/{model}"


def install_openapi(app: FastAPI, model_name: str) -> None:
    """Make ``app.openapi()`` return the completed schema (built once, then cached)."""
    from fastapi.openapi.utils import get_openapi

    from plguard import __version__

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title="plguard", version=__version__, routes=app.routes,
                                 description="OpenAI-compatible chat API behind the plguard "
                                             "guard. Every non-2xx answer is "
                                             '{"error": {"message", "type", "param", "code"}}.')
            _complete(schema, model_name)
            _complete_moderations(schema, model_name)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented hook


def _complete(schema: dict[str, Any], model_name: str) -> None:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for path_item in schema["paths"].values():
        for op in path_item.values():
            _drop_fastapi_422(op)
    # The stream: one JSON chunk per event, then the literal [DONE].
    chunk = ChatCompletionChunk.model_json_schema(ref_template=_REF, mode="serialization")
    components.update(chunk.pop("$defs", {}))
    components["ChatCompletionChunk"] = chunk
    event = {
        "type": "object", "required": ["data"],
        "properties": {"data": {"anyOf": [
            {"const": "[DONE]"},
            {"type": "string", "contentMediaType": "application/json",
             "contentSchema": {"$ref": _REF.format(model="ChatCompletionChunk")}},
        ]}},
    }
    ok = schema["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]
    ok["description"] = ("The guarded answer; with `stream: true` server-sent events: a "
                         "role chunk, the text as each window of it is allowed, one final "
                         "chunk with the finish_reason and the guard's trace (on a block: the "
                         "refusal, `content_filter`), the usage chunk when "
                         "`stream_options.include_usage` asks, then `data: [DONE]`.")
    ok["content"]["text/event-stream"] = {"itemSchema": event}
    # The one model served: other names are documented 404s, not a second success.
    pinned = {"type": "string", "enum": [model_name],
              "description": "The model this server serves (server.model_name)."}
    components["ChatCompletionRequest"]["properties"]["model"] = pinned
    components["GuardCheckRequest"]["properties"]["model"] = {
        "anyOf": [pinned, {"type": "null"}],
        "description": "Optional; when given, the model this server serves."}
    for param in schema["paths"]["/v1/models/{model}"]["get"]["parameters"]:
        param["example"] = model_name
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)


def _complete_moderations(schema: dict[str, Any], model_name: str) -> None:
    # The served model is the one name accepted: a setting, which the request model cannot
    # see. A list of texts has no length limit but the body's (server.max_body_bytes): it
    # is judged in chunks of server.max_batch_size.
    components = schema["components"]["schemas"]
    if "ModerationRequest" not in components:
        return
    props = components["ModerationRequest"]["properties"]
    props["model"] = {"anyOf": [{"type": "string", "enum": [model_name]}, {"type": "null"}],
                      "description": "Optional; when given, the model this server serves."}


def _drop_fastapi_422(op: dict[str, Any]) -> None:
    # FastAPI adds a 422 with its own body to every route with parameters; a route that
    # documents its own 422 keeps it, the others (a path parameter of type str) cannot
    # give one.
    ours = op.get("responses", {}).get("422")
    if ours is not None and "HTTPValidationError" in str(ours):
        del op["responses"]["422"]
