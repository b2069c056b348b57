import subprocess
import sys

import pytest

from plguard.config import GuardConfig
from plguard.errors import ConfigError, InputError
from plguard.messages import check_response, replace_lone_surrogates, to_chat


def test_string_prompt_becomes_user_message():
    chat = to_chat("hello")
    assert [(m.role, m.content) for m in chat] == [("user", "hello")]


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        ([], "no messages"),
        (None, "expected a list"),
        ("   ", "empty"),
        ([{"role": "user"}], "messages[0]: missing 'content'"),
        ([{"content": "x"}], "messages[0]: missing 'role'"),
        ([{"role": "user", "content": 3}], "messages[0].content: must be a string"),
        ([{"role": "usr", "content": "x"}], "did you mean 'user'"),
        ([{"role": "system", "content": "x"}], "no message has role 'user'"),
        ([42], "messages[0]: a message must be a mapping"),
        ("hi \ud800", "messages: contains a lone UTF-16 surrogate (U+D800) at character 3"),
        ([{"role": "user", "content": "\udfff"}], "messages[0].content: contains a lone"),
    ],
)
def test_bad_messages(messages, needle):
    with pytest.raises(InputError) as exc:
        to_chat(messages)
    assert needle in str(exc.value)


def test_unknown_config_key_lists_valid_keys(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("thresholds:\n  unsafee: 0.2\n")
    with pytest.raises(ConfigError) as exc:
        GuardConfig.from_yaml(f)
    msg = str(exc.value)
    assert str(f) in msg and "thresholds.unsafee" in msg and "did you mean 'unsafe'" in msg
    assert "over_refusal, unsafe" in msg


def test_bad_value_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="thresholds.unsafe"):
        GuardConfig.from_dict({"thresholds": {"unsafe": 2}})
    with pytest.raises(ConfigError, match="not found"):
        GuardConfig.from_yaml(tmp_path / "nope.yaml")


def test_overrides_win_over_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("policy: minimal\nthresholds: {unsafe: 0.2}\n")
    cfg = GuardConfig.from_yaml(f, **{"thresholds.unsafe": 0.7})
    assert cfg.thresholds.unsafe == 0.7 and cfg.thresholds.over_refusal == 0.5
    assert cfg.grounder_model == cfg.generator


def test_import_plguard_does_not_import_torch_or_vllm():
    code = ("import sys, plguard; import plguard.cli; "
            "print('torch' in sys.modules, 'vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_lone_surrogates_in_a_response():
    with pytest.raises(InputError, match="response: contains a lone UTF-16 surrogate"):
        check_response("ok \udc80")
    assert check_response("\U0001f600 \u202e\x00") == "\U0001f600 \u202e\x00"  # valid text
    assert replace_lone_surrogates("a\ud800b\U0001f600") == "a\ufffdb\U0001f600"
