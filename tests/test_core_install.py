"""The core install guards without the laboratory extra (scipy, scikit-learn, datasets).

Each check runs in a fresh Python whose import system cannot see those three, nor what only
they bring (pandas, joblib ...): the path finder is wrapped so that it finds none of their
modules and lists none of their distributions, which is what ``pip install plguard``
without ``[lab]`` looks like to plguard and to transformers (which probes for scipy,
scikit-learn and pandas). There, the Guard on
the embedded model checks a pair, the real server answers the real ``openai`` client, and
the laboratory commands stop with one line that names the extra, before any work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Run first in each child: hide the lab extra's packages from imports and from metadata.
HIDE_LAB = textwrap.dedent('''
    import importlib.machinery, importlib.util, importlib.metadata, sys

    # The lab extra, and the packages only it pulls in (pyarrow is a core dependency).
    HIDDEN = {"scipy", "sklearn", "datasets", "pandas", "joblib", "threadpoolctl", "dill",
              "multiprocess", "xxhash", "cloudpickle", "narwhals"}
    HIDDEN_DISTS = HIDDEN - {"sklearn"} | {"scikit-learn", "scikit_learn"}

    class WithoutLab:
        """The path finder, blind to the lab extra's packages (as if not installed)."""

        def __init__(self, inner):
            self.inner = inner

        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in HIDDEN:
                return None
            return self.inner.find_spec(name, path, target)

        def find_distributions(self, *args, **kwargs):
            for d in self.inner.find_distributions(*args, **kwargs):
                if (d.metadata["Name"] or "").lower() not in HIDDEN_DISTS:
                    yield d

        def invalidate_caches(self):
            self.inner.invalidate_caches()

    assert not HIDDEN & {m.partition(".")[0] for m in sys.modules}
    sys.meta_path[:] = [WithoutLab(f) if f is importlib.machinery.PathFinder else f
                        for f in sys.meta_path]
    for _m in HIDDEN:
        assert importlib.util.find_spec(_m) is None, _m
        try:
            __import__(_m)
        except ModuleNotFoundError:
            pass
        else:
            raise AssertionError(_m + " still imports")
    try:
        importlib.metadata.version("scikit-learn")
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        raise AssertionError("scikit-learn's metadata is still visible")
''')

PRODUCT = textwrap.dedent('''
    import json
    import openai
    from plguard import Guard
    from plguard.config import ServerConfig
    from plguard.server import build_app
    from plguard.testing import LiveServer

    guard = Guard.from_config(**{"generation.max_new_tokens": 8})
    result = guard.check("How do I boil an egg?", "Boil it for nine minutes.")
    out = {"check": result.decision.action,
           "predicates": sorted(result.grounding.probs)}
    with LiveServer(build_app(guard, ServerConfig())) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                               max_retries=0, timeout=300)
        resp = client.chat.completions.create(
            model="plguard", max_tokens=8,
            messages=[{"role": "user", "content": "Name a colour of the sky."}])
        out["chat"] = (resp.model_extra or {})["plguard"]["action"]
        out["content"] = resp.choices[0].message.content
    out["hidden_loaded"] = sorted(m for m in sys.modules if m.partition(".")[0] in HIDDEN)
    print("RESULT " + json.dumps(out))
''')

# A lab command with arguments that would start work (load the model, read a run folder).
LAB_COMMANDS = {
    "eval": ["eval", "xstest", "--limit", "1", "--no-progress", "--out", "{tmp}/xs"],
    "heads fit": ["heads", "fit", "--limit-per-source", "2", "--quiet",
                  "--out", "{tmp}/heads.json"],
    "view": ["view", "{tmp}", "--export", "{tmp}/view.html"],
}


def _run(code: str, *, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PLGUARD_API_KEY", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-c", HIDE_LAB + code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_the_guard_and_the_server_run_without_the_lab_extra():
    proc = _run(PRODUCT, timeout=540)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line.removeprefix("RESULT "))
    assert out["check"] in {"allow", "refuse", "rewrite"}
    assert {"request_is_harmful", "response_refuses"} <= set(out["predicates"])
    assert out["chat"] in {"allow", "refuse", "rewrite"} and out["content"]
    assert out["hidden_loaded"] == []


@pytest.mark.parametrize("command", sorted(LAB_COMMANDS))
def test_a_lab_command_names_the_lab_extra_when_it_is_missing(command, tmp_path):
    argv = [a.format(tmp=tmp_path) for a in LAB_COMMANDS[command]]
    code = ("import runpy\nsys.argv = ['plguard', *" + repr(argv) + "]\n"
            "runpy.run_module('plguard', run_name='__main__', alter_sys=True)\n")
    proc = _run(code, timeout=120)
    assert proc.returncode == 2, proc.stderr[-4000:]
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith(f"plguard: error: plguard {command} needs the laboratory extra")
    assert "pip install 'plguard[lab]'" in err
    assert "(missing: scipy, scikit-learn, datasets)" in err
    assert list(tmp_path.iterdir()) == []  # stopped before any work
