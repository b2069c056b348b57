"""A small, safe Markdown-to-HTML renderer for the run reports.

The reports are written by ``plguard report`` (headings, paragraphs, lists, pipe tables,
code, emphasis, links and images), so this covers that subset and nothing more. All text
is HTML-escaped before markup is applied, and only http(s), in-page and run-folder links
survive, so a report file cannot inject script into the page. No dependency and no CDN:
the page must work offline and from an exported file.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

# Maps a relative link/image target (as written in the report) to a URL, or None to drop.
Resolver = Callable[[str], str | None]

_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)(?:\s+&quot;[^)]*&quot;)?\)")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)(?:\s+&quot;[^)]*&quot;)?\)")
_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*|__([^_]+)__")
_EM = re.compile(r"(?<![\w*])\*([^*\s][^*]*)\*(?!\w)|(?<![\w_])_([^_\s][^_]*)_(?![\w])")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_LIST = re.compile(r"^(\s*)([-*+]|\d+[.)])\s+(.*)$")


def _url(target: str, resolve: Resolver) -> str | None:
    t = html.unescape(target)
    if t.startswith(("http://", "https://", "#")):
        return t
    if ":" in t.split("/")[0]:
        return None  # javascript:, data: and other schemes are not followed
    return resolve(t)


def inline(text: str, resolve: Resolver) -> str:
    """Escape ``text`` and apply inline markup (code first, so its content stays literal)."""
    codes: list[str] = []

    def keep(m: re.Match[str]) -> str:
        codes.append(f"<code>{m.group(1)}</code>")
        return f"\x00{len(codes) - 1}\x00"

    out = _CODE.sub(keep, html.escape(text, quote=True))

    def image(m: re.Match[str]) -> str:
        url = _url(m.group(2), resolve)
        if url is None:
            return m.group(1)
        return f'<img alt="{m.group(1)}" src="{html.escape(url, quote=True)}">'

    def link(m: re.Match[str]) -> str:
        url = _url(m.group(2), resolve)
        if url is None:
            return m.group(1)
        return f'<a href="{html.escape(url, quote=True)}">{m.group(1)}</a>'

    out = _IMAGE.sub(image, out)
    out = _LINK.sub(link, out)
    out = _BOLD.sub(lambda m: f"<strong>{m.group(1) or m.group(2)}</strong>", out)
    out = _EM.sub(lambda m: f"<em>{m.group(1) or m.group(2)}</em>", out)
    return re.sub(r"\x00(\d+)\x00", lambda m: codes[int(m.group(1))], out)


def _cells(line: str) -> list[str]:
    s = line.strip()
    s = s[1:] if s.startswith("|") else s
    s = s[:-1] if s.endswith("|") and not s.endswith("\\|") else s
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", s)]


def render(text: str, resolve: Resolver = lambda _t: None) -> str:
    """HTML for a Markdown document (the subset described in the module doc)."""
    lines = text.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    para: list[str] = []
    i = 0

    def flush() -> None:
        if para:
            out.append("<p>" + inline(" ".join(para), resolve) + "</p>")
            para.clear()

    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("```"):
            flush()
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            out.append("<pre><code>" + html.escape("\n".join(lines[i + 1:j])) + "</code></pre>")
            i = j + 1
            continue
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            flush()
            n = len(m.group(1))
            out.append(f"<h{n}>{inline(m.group(2), resolve)}</h{n}>")
            i += 1
            continue
        if "|" in line and i + 1 < len(lines) and _TABLE_SEP.match(lines[i + 1]):
            flush()
            head = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                rows.append(_cells(lines[i]))
                i += 1
            out.append("<table><thead><tr>" + "".join(
                f"<th>{inline(c, resolve)}</th>" for c in head) + "</tr></thead><tbody>"
                + "".join("<tr>" + "".join(f"<td>{inline(c, resolve)}</td>" for c in r)
                          + "</tr>" for r in rows) + "</tbody></table>")
            continue
        lm = _LIST.match(line)
        if lm:
            flush()
            ordered = lm.group(2)[0].isdigit()
            items = []
            while i < len(lines) and (lm := _LIST.match(lines[i])):
                items.append(f"<li>{inline(lm.group(3), resolve)}</li>")
                i += 1
            tag = "ol" if ordered else "ul"
            out.append(f"<{tag}>{''.join(items)}</{tag}>")
            continue
        if line.strip().startswith(">"):
            flush()
            out.append("<blockquote>" + inline(line.strip()[1:].strip(), resolve)
                       + "</blockquote>")
            i += 1
            continue
        if re.match(r"^\s*([-*_])\s*(\1\s*){2,}$", line):
            flush()
            out.append("<hr>")
            i += 1
            continue
        if line.strip():
            para.append(line.strip())
        else:
            flush()
        i += 1
    flush()
    return "\n".join(out)


__all__ = ["Resolver", "inline", "render"]
