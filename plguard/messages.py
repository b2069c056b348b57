"""Validation of chat input: every problem named with where it is."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from plguard.errors import InputError, did_you_mean
from plguard.types import ROLES, Chat, Message

MessagesLike = str | Message | Mapping[str, Any] | Sequence[Message | Mapping[str, Any]]

_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    r"""Where ``text`` holds a lone UTF-16 surrogate, a short description of it; else None.

    JSON lets ``"\ud800"`` through and Python keeps it in a ``str``, but such a string is
    not Unicode text: tokenizers refuse it and it cannot be encoded as UTF-8 to answer.
    """
    m = _SURROGATE.search(text)
    if m is None:
        return None
    return (f"contains a lone UTF-16 surrogate (U+{ord(m.group()):04X}) at character "
            f"{m.start()}, which is not valid Unicode text")


def replace_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD, for text plguard did not ask for."""
    return _SURROGATE.sub("\ufffd", text)


def check_text(text: str, where: str) -> str:
    """``text`` if it is valid Unicode text; otherwise an InputError naming ``where``."""
    problem = lone_surrogate(text)
    if problem:
        raise InputError(f"{where}: {problem}")
    return text


def to_chat(messages: Any, where: str = "messages") -> Chat:
    """Normalise ``messages`` (a string, Message, dict or list of them) to a Chat."""
    if isinstance(messages, str):
        if not messages.strip():
            raise InputError(f"{where}: the prompt is empty")
        return (Message("user", check_text(messages, where)),)
    if isinstance(messages, Message | Mapping):
        messages = [messages]
    if messages is None or not isinstance(messages, Sequence):
        raise InputError(
            f"{where}: expected a list of messages like "
            f"[{{'role': 'user', 'content': '...'}}], got {type(messages).__name__}"
        )
    if len(messages) == 0:
        raise InputError(f"{where}: no messages; give at least one user message")
    chat = tuple(_message(m, f"{where}[{i}]") for i, m in enumerate(messages))
    if not any(m.role == "user" for m in chat):
        raise InputError(f"{where}: no message has role 'user'")
    return chat


def _message(m: Any, where: str) -> Message:
    if isinstance(m, Message):
        role, content = m.role, m.content
    elif isinstance(m, Mapping):
        if "role" not in m:
            raise InputError(f"{where}: missing 'role'")
        if "content" not in m:
            raise InputError(f"{where}: missing 'content'")
        role, content = m["role"], m["content"]
    else:
        raise InputError(f"{where}: a message must be a mapping with 'role' and 'content', "
                         f"got {type(m).__name__}")
    if role not in ROLES:
        raise InputError(f"{where}.role: unknown role {role!r}{did_you_mean(str(role), ROLES)}; "
                         f"valid roles: {', '.join(ROLES)}")
    if not isinstance(content, str):
        raise InputError(f"{where}.content: must be a string, got {type(content).__name__}")
    return Message(role, check_text(content, f"{where}.content"))


def check_response(response: Any, where: str = "response") -> str:
    """A response to guard must be a string (it may be empty)."""
    if not isinstance(response, str):
        raise InputError(f"{where}: must be a string, got {type(response).__name__}")
    return check_text(response, where)
