"""The report renderer: the Markdown subset the reports use, and nothing unsafe."""

from __future__ import annotations

from plguard_lab.view.markdown import render


def test_tables_headings_lists_code_and_images():
    md = ("# Report\n\nSome **bold** and `code <x>` text.\n\n"
          "| method | rate |\n|---|---:|\n| base | 12.0% [8.1, 16.2] |\n| plguard | 3% |\n\n"
          "- one\n- two\n\n```\na < b\n```\n\n![methods](methods.png)\n")
    out = render(md, lambda t: "/files/" + t)
    assert "<h1>Report</h1>" in out
    assert "<strong>bold</strong>" in out and "<code>code &lt;x&gt;</code>" in out
    assert "<th>method</th>" in out and "<td>12.0% [8.1, 16.2]</td>" in out
    assert "<ul><li>one</li><li>two</li></ul>" in out
    assert "<pre><code>a &lt; b</code></pre>" in out
    assert '<img alt="methods" src="/files/methods.png">' in out


def test_markup_in_reports_cannot_inject_script():
    md = ('<script>alert(1)</script>\n\n[x](javascript:alert(1)) '
          '![y](data:text/html;base64,AAAA) [ok](https://example.org/a?b=1&c=2)\n'
          '\n![z](missing.png)\n')
    out = render(md, lambda t: None)
    assert "<script>" not in out and "&lt;script&gt;" in out
    assert "javascript:" not in out and "data:text" not in out
    assert '<a href="https://example.org/a?b=1&amp;c=2">ok</a>' in out
    assert "<img" not in out  # unresolvable image: alt text only
