"""Dataset reading and trace writing for `plguard batch` (no model)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plguard.batchjob.io import TraceSink, read_rows
from plguard.cli import main
from plguard.errors import InputError


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_csv_and_parquet_inputs_read_the_same_rows(tmp_path):
    rows = [{"id": "a", "prompt": "p1", "response": "r1"}, {"id": "b", "prompt": "p2"}]
    j = _jsonl(tmp_path / "in.jsonl", rows)
    c = tmp_path / "in.csv"
    c.write_text("id,prompt,response\na,p1,r1\nb,p2,\n")
    p = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist([{**r, "response": r.get("response")} for r in rows]), p)
    for path in (j, c, p):
        got = [(r.id, r.prompt, r.response) for r in read_rows(path)]
        assert got == [("a", "p1", "r1"), ("b", "p2", None)], path
    assert read_rows(j)[1].where == f"{j}:2"


def test_messages_prompts_and_default_ids(tmp_path):
    msgs = [{"role": "user", "content": "hi"}]
    path = _jsonl(tmp_path / "in.jsonl", [{"prompt": msgs}, {"prompt": "x"}])
    rows = read_rows(path)
    assert [r.id for r in rows] == ["row-1", "row-2"] and rows[0].prompt == msgs


@pytest.mark.parametrize("name,text,kw,needles", [
    ("in.csv", "id,question\n1,hi\n", {}, ["in.csv:2", "no prompt column 'prompt'",
                                          "columns: id, question"]),
    ("in.csv", "id,promt\n1,hi\n", {}, ["did you mean 'promt'"]),
    ("in.jsonl", '{"prompt": "a"}\n{"prompt": \n', {}, ["in.jsonl:2", "not valid JSON"]),
    ("in.jsonl", '["a"]\n', {}, ["in.jsonl:1", "JSON object per line"]),
    ("in.jsonl", '{"prompt": 3}\n', {}, ["in.jsonl:1", "text or a list of messages"]),
    ("in.jsonl", '{"prompt": "a", "response": 7}\n', {}, ["in.jsonl:1", "'response'"]),
    ("in.jsonl", '{"id": 1, "prompt": "a"}\n{"id": 1, "prompt": "b"}\n', {},
     ["in.jsonl:2", "duplicate id '1'", "first at", "in.jsonl:1"]),
    ("in.jsonl", '{"prompt": "a"}\n', {"response_column": "answer"},
     ["no column 'answer'", "--response-column"]),
    ("in.txt", "hello\n", {}, ["unsupported input format '.txt'"]),
    ("in.jsonl", "\n", {}, ["no rows"]),
])
def test_bad_input_is_named_with_its_location(tmp_path, name, text, kw, needles):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as err:
        read_rows(path, **kw)
    for n in needles:
        assert n in str(err.value)


def test_missing_and_damaged_files(tmp_path):
    with pytest.raises(InputError, match="input file not found"):
        read_rows(tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        read_rows(bad)
    with pytest.raises(InputError, match="unsupported output format '.csv'"):
        TraceSink(tmp_path / "out.csv")


def _rec(rid, **kw):
    return {"id": rid, "prompt": "p", "predicates": {"a": 0.5}, "trace": {"x": [1]},
            "error": None, **kw}


def test_parquet_sink_journals_then_writes_and_resumes(tmp_path):
    out = tmp_path / "out.parquet"
    sink = TraceSink(out)
    sink.append(_rec("1"))
    journal = tmp_path / "out.parquet.partial.jsonl"
    assert journal.is_file() and not out.exists()  # interrupted here: the journal holds it
    again = TraceSink(out)
    assert "1" in again and "2" not in again
    again.append(_rec("1"))  # a repeat is ignored, never duplicated
    again.append(_rec("2", error="boom"))
    again.finish()
    assert not journal.exists()
    rows = pq.read_table(out).to_pylist()
    assert [r["id"] for r in rows] == ["1", "2"]
    assert json.loads(rows[0]["predicates"]) == {"a": 0.5} and rows[1]["error"] == "boom"
    third = TraceSink(out)  # a later run with new rows keeps the old ones
    assert "1" in third and "2" not in third and third.failed == {"2"}  # "2" is retried
    third.append(_rec("2"))
    third.append(_rec("3"))
    third.finish()
    rows = pq.read_table(out).to_pylist()
    assert [r["id"] for r in rows] == ["1", "2", "3"] and rows[1]["error"] is None


def test_jsonl_sink_retries_failed_rows_and_keeps_each_id_once(tmp_path):
    out = tmp_path / "out.jsonl"
    sink = TraceSink(out)
    sink.append(_rec("1", error="transient"))
    sink.append(_rec("2"))
    sink.finish()
    again = TraceSink(out)
    assert "1" not in again and "2" in again and again.failed == {"1"}
    again.append(_rec("1"))
    again.finish()
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["id"], r["error"]) for r in recs] == [("1", None), ("2", None)]


def test_cli_reports_bad_input_without_a_traceback(tmp_path, capsys):
    path = tmp_path / "in.csv"
    path.write_text("id,question\n1,hi\n")
    assert main(["batch", str(path), str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "in.csv:2" in err and "Traceback" not in err
    assert main(["batch", str(path), str(tmp_path / "o.jsonl"), "--workers", "2"]) == 2
    assert "--workers needs --ray" in capsys.readouterr().err
