"""A plain-English policy split into spans a draft can cite: headings, paragraphs, items.

Parsed with markdown-it (CommonMark), whose block tokens carry their source lines, so a
span cites ``POLICY.md:line`` exactly. Each span keeps the headings above it, because a
list item ("no dosing beyond the label") often means something only under its heading.
"""

from __future__ import annotations

from dataclasses import dataclass

_BLOCKS = {"heading_open": "heading", "paragraph_open": "paragraph", "fence": "code",
           "code_block": "code"}


@dataclass(frozen=True, slots=True)
class Span:
    """One citable piece of the document."""

    index: int  # 1-based, in document order
    kind: str  # heading | paragraph | item | code
    text: str
    line: int  # first line (1-based)
    end_line: int  # last line (1-based, inclusive)
    headings: tuple[str, ...]  # the enclosing headings, outermost first

    @property
    def cite(self) -> str:
        """``L12`` or ``L12-14``."""
        return f"L{self.line}" if self.end_line == self.line else f"L{self.line}-{self.end_line}"


def split_spans(text: str) -> list[Span]:
    """The spans of a Markdown (or plain-text) policy, in order; blank documents give none.

    A paragraph inside a list item is an ``item`` span; a heading is a span too (a short
    policy may be nothing but headings and items).
    """
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(text)
    out: list[Span] = []
    headings: list[tuple[int, str]] = []  # (level, text)
    in_item = 0
    for i, tok in enumerate(tokens):
        if tok.type == "list_item_open":
            in_item += 1
        elif tok.type == "list_item_close":
            in_item -= 1
        kind = _BLOCKS.get(tok.type)
        if kind is None or tok.map is None:
            continue
        if kind == "code":
            body = tok.content
        else:  # the inline token after an opening tag holds the text
            body = tokens[i + 1].content if i + 1 < len(tokens) else ""
        body = " ".join(body.split())
        if not body:
            continue
        if kind == "heading":
            level = int(tok.tag[1:])
            headings = [h for h in headings if h[0] < level]
            above = tuple(h for _, h in headings)
            headings.append((level, body))
        else:
            above = tuple(h for _, h in headings)
            if kind == "paragraph" and in_item:
                kind = "item"
        start, end = tok.map
        out.append(Span(len(out) + 1, kind, body, start + 1, max(start + 1, end), above))
    return out


__all__ = ["Span", "split_spans"]
