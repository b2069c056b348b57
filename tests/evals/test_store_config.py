import json

import pytest

from plguard.errors import ConfigError
from plguard.records.store import check_same_config


def test_resume_allows_fields_added_later_but_not_changed_values(tmp_path):
    m = tmp_path / "manifest.json"
    m.write_text(json.dumps({"config": {"policy": "detailed", "grounding": {"batch_size": 32}}}))
    # a field that did not exist when the run started (at its default) does not block
    new = {"policy": "detailed", "grounding": {"batch_size": 32, "cache": None}}
    assert check_same_config(m, new)["config"]["policy"] == "detailed"
    with pytest.raises(ConfigError, match="grounding.batch_size"):
        check_same_config(m, {"policy": "detailed", "grounding": {"batch_size": 8}})
    with pytest.raises(ConfigError, match="policy"):
        check_same_config(m, {"grounding": {"batch_size": 32}})
