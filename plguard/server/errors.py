"""The server's errors: one OpenAI-shaped body for every non-2xx answer.

``{"error": {"message", "type", "param", "code"}}``, with a message that says what was
wrong and where: FastAPI's own answers (a ``{"detail": [...]}`` 422, "There was an error
parsing the body") are rewritten here, so no framework wording or traceback reaches a
client.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from plguard.server.batching import GuardFailed, GuardUnavailable
from plguard.server.schemas import error_json


class ApiError(Exception):
    """An error answered with an OpenAI-style body."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status, message, type, param, code)

    def response(self) -> JSONResponse:
        """The HTTP answer."""
        return JSONResponse(error_json(self.message, type=self.type, param=self.param,
                                       code=self.code), status_code=self.status)


def unanswered(exc: GuardUnavailable | GuardFailed) -> ApiError:
    """The answer to a request the Guard did not answer: 503 for an outage, 500 for a bug."""
    if isinstance(exc, GuardUnavailable):
        return ApiError(503, f"{exc}; the request was not answered, retry later",
                        type="service_unavailable", code="backend_error")
    return ApiError(500, f"{exc}; the request was not answered", type="server_error",
                    code="internal_error")


def add_error_handlers(app: FastAPI) -> None:
    """Answer every error the app raises in the OpenAI error shape."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return ApiError(400, "the request body is not valid JSON",
                            code="invalid_json").response()
        first = errors[0] if errors else {}
        if tuple(first.get("loc", ())) == ("body",):
            # Not an object at all: null, a list, an empty body, or a body FastAPI did
            # not read as JSON because of its Content-Type.
            return ApiError(422, "the request body must be a JSON object (sent with "
                            "'Content-Type: application/json'), like {\"model\": ..., "
                            "\"messages\": [{\"role\": \"user\", \"content\": \"...\"}]}",
                            code="invalid_value").response()
        found = _field_errors(errors)
        msg = "; ".join(f"{where or 'body'}: {what}" for where, what in found[:5])
        return ApiError(422, msg, param=found[0][0] if found else None,
                        code="invalid_value").response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.__cause__ is not None:
            # FastAPI's "There was an error parsing the body": say what was wrong.
            return ApiError(400, f"the request body is not valid JSON: "
                            f"{_parse_problem(exc.__cause__)}", code="invalid_json").response()
        msg = (f"no route {request.method} {request.url.path}" if exc.status_code == 404
               else str(exc.detail))
        return ApiError(exc.status_code, msg, code=f"http_{exc.status_code}").response()


def _field_errors(errors: list[Any]) -> list[tuple[str, str]]:
    """(field path as the client wrote it, problem) for each validation error.

    Pydantic names the member of a union it tried (``content.list[ContentPart].0.text``);
    those names are dropped, and so is the error of a member the value was not meant for:
    a list content with a bad part reports the part, not "Input should be a valid string".
    """
    def where(e: Any) -> tuple[str, ...]:
        return tuple(str(x) for x in e.get("loc", ()) if x != "body" and not (
            isinstance(x, str) and ("[" in x or x in _UNION_TAGS)))

    locs = [where(e) for e in errors]
    deeper = {loc[:n] for loc in locs for n in range(len(loc))}
    out = [(".".join(loc), str(e.get("msg", "invalid")))
           for loc, e in zip(locs, errors, strict=True) if loc not in deeper]
    return list(dict.fromkeys(out))


_UNION_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


def _parse_problem(cause: BaseException) -> str:
    if isinstance(cause, UnicodeDecodeError):
        return "it is not UTF-8"
    if isinstance(cause, RecursionError):
        return "it is nested too deeply"
    text = str(cause)
    return text[:200] + ("..." if len(text) > 200 else "")
