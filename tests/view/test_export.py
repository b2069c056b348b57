"""The static export and the ``plguard view`` command."""

from __future__ import annotations

import json
import re

from plguard.cli import build_parser, main
from plguard_lab.view.export import export_html
from plguard_lab.view.page import embed_json, render_page
from plguard_lab.view.state import ViewState

from .conftest import RUN, TRACES


def _embedded(html: str):
    m = re.search(r'<script type="application/json" id="plguard-data">(.*?)</script>', html, re.S)
    assert m is not None
    return json.loads(m.group(1))


def test_export_is_self_contained(tmp_path):
    state = ViewState.from_source(RUN)
    html = export_html(state, tmp_path / "out" / "run.html").read_text(encoding="utf-8")
    data = _embedded(html)
    assert set(data["records"]) == set(state.records)
    assert [r["key"] for r in data["rows"]] == list(state.records)
    key = next(k for k, r in state.records.items() if r["method"] == "plguard")
    assert data["records"][key]["prompt"] == state.records[key]["prompt"]
    assert data["records"][key]["replay"] is not None  # computed once, at export time
    # Nothing is fetched: no external script, style, image or font.
    assert not re.search(r'(src|href)="(?!data:|#)', html)
    assert "<link rel=\"stylesheet\"" not in html and "@import" not in html
    assert all(p["src"].startswith("data:image/") for p in data["report"]["plots"])
    for doc in data["report"]["documents"]:
        assert "/files/" not in doc["html"]


def test_hostile_text_cannot_end_the_data_element():
    nasty = "</script><script>alert(1)</script><!-- \u2028 & >"
    page = render_page({"x": nasty, "y": "/*{{js}}*/ {{data}}"})
    assert "<script>alert(1)" not in page
    data = _embedded(page)
    assert data == {"x": nasty, "y": "/*{{js}}*/ {{data}}"}
    assert json.loads(embed_json(nasty)) == nasty


def test_cli_export_and_errors(tmp_path, capsys):
    out = tmp_path / "t.html"
    assert main(["view", str(TRACES), "--export", str(out)]) == 0
    assert _embedded(out.read_text(encoding="utf-8"))["run"]["kind"] == "traces"
    assert "wrote" in capsys.readouterr().err
    assert main(["view", str(tmp_path / "missing"), "--export", str(out)]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    args = build_parser().parse_args(["view", str(RUN)])
    assert (args.host, args.port, args.export) == ("127.0.0.1", 8765, None)
