"""``plguard view --export FILE.html``: one self-contained HTML file of a run.

The file embeds every record, the run overview, the policies' explanations and the report
(plots as data URIs) as JSON, with the page's CSS and script inline: it opens from disk
with no server and no network, so it can be attached to an audit. The what-if panel needs
the live policy and is left out; each record's replay check is computed here, once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plguard_lab.view.page import render_page
from plguard_lab.view.state import ViewState


def export_data(state: ViewState) -> dict[str, Any]:
    """Everything the page needs, as one JSON-ready object."""
    # Each record's policy (explanations of every rule) is in run["policies"] once; repeating
    # it per record would multiply the file's size by the number of records.
    return {"run": state.run_info(), "rows": state.rows(),
            "records": {k: {**state.record(k), "policy": None} for k in state.records},
            "report": state.report(inline_files=True)}


def export_html(source: str | Path | ViewState, out: str | Path, *,
                policy: str | None = None) -> Path:
    """Write the standalone page of a run folder or trace file to ``out``.

    Args:
        source: a run folder, a trace file, or an already loaded :class:`ViewState`.
        out: the HTML file to write (its folder is created).
        policy: a policy bundle name or folder to use instead of the run's own.

    Returns:
        The path written.
    """
    state = source if isinstance(source, ViewState) else ViewState.from_source(source, policy)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    page = render_page(export_data(state), title=f"{state.run_info()['title']} · plguard view")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)  # a reader never sees half a file
    return path


__all__ = ["export_data", "export_html"]
