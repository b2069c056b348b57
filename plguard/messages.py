"""Validation of chat input: every problem named with where it is."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from plguard.errors import InputError, did_you_mean
from plguard.types import ROLES, Chat, Message

MessagesLike = str | Message | Mapping[str, Any] | Sequence[Message | Mapping[str, Any]]


def to_chat(messages: Any, where: str = "messages") -> Chat:
    """Normalise ``messages`` (a string, Message, dict or list of them) to a Chat."""
    if isinstance(messages, str):
        if not messages.strip():
            raise InputError(f"{where}: the prompt is empty")
        return (Message("user", messages),)
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
    return Message(role, content)


def request_text(chat: Chat) -> str:
    """The request the policy judges: the last user message."""
    return next(m.content for m in reversed(chat) if m.role == "user")


def check_response(response: Any, where: str = "response") -> str:
    """A response to guard must be a string (it may be empty)."""
    if not isinstance(response, str):
        raise InputError(f"{where}: must be a string, got {type(response).__name__}")
    return response
