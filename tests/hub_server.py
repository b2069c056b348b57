"""A local stand-in for the Hugging Face Hub's HTTP API, serving model folders from disk.

``huggingface_hub`` talks to whatever ``HF_ENDPOINT`` names, so the real download code path
(``snapshot_download``: repo info, file tree, then each file's resolve URL) runs against
this server on loopback, with no network. It implements only what a snapshot download of a
public model needs, plus a gated repository that answers 403 like the Hub does.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """Serve ``repos`` (repo id -> folder); ``gated`` repo ids answer 403 GatedRepo."""

    def __init__(self, repos: dict[str, Path], gated: tuple[str, ...] = ()) -> None:
        self.repos = {k: Path(v) for k, v in repos.items()}
        self.gated = set(gated)
        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:  # noqa: N802
                hub._serve(self, body=False)

            def do_GET(self) -> None:  # noqa: N802
                hub._serve(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _files(self, repo: str) -> list[Path]:
        root = self.repos[repo]
        return sorted(p for p in root.rglob("*") if p.is_file())

    def _serve(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlparse(h.path).path)
        self.requests.append(f"{h.command} {path}")
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"]:
            repo = "/".join(parts[2:4])
            rest = parts[4:]
            if not self._check_repo(h, repo):
                return
            if rest[:1] == ["revision"]:
                siblings = [{"rfilename": str(p.relative_to(self.repos[repo]))}
                            for p in self._files(repo)]
                return self._json(h, {"id": repo, "sha": COMMIT, "siblings": siblings,
                                      "private": False, "gated": False}, body)
            if rest[:1] == ["tree"]:
                tree = [{"type": "file", "path": str(p.relative_to(self.repos[repo])),
                         "size": p.stat().st_size, "oid": _oid(p)} for p in self._files(repo)]
                return self._json(h, tree, body)
            return self._status(h, 404, "EntryNotFound")
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = "/".join(parts[:2])
            if not self._check_repo(h, repo):
                return
            f = self.repos[repo].joinpath(*parts[4:])
            if not f.is_file():
                return self._status(h, 404, "EntryNotFound")
            data = f.read_bytes()
            h.send_response(200)
            h.send_header("Content-Type", "application/octet-stream")
            h.send_header("Content-Length", str(len(data)))
            h.send_header("ETag", f'"{_oid(f)}"')
            h.send_header("X-Repo-Commit", COMMIT)
            h.end_headers()
            if body:
                h.wfile.write(data)
            return
        self._status(h, 404, "RepoNotFound")

    def _check_repo(self, h: BaseHTTPRequestHandler, repo: str) -> bool:
        if repo in self.gated:
            self._status(h, 403, "GatedRepo", f"Access to model {repo} is restricted.")
            return False
        if repo not in self.repos:
            self._status(h, 404, "RepoNotFound", f"Repository {repo} not found")
            return False
        return True

    @staticmethod
    def _json(h: BaseHTTPRequestHandler, obj: object, body: bool) -> None:
        data = json.dumps(obj).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if body:
            h.wfile.write(data)

    @staticmethod
    def _status(h: BaseHTTPRequestHandler, code: int, error_code: str, msg: str = "") -> None:
        data = json.dumps({"error": msg or error_code}).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("X-Error-Code", error_code)
        h.send_header("X-Error-Message", msg or error_code)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


def _oid(p: Path) -> str:
    return hashlib.sha1(p.read_bytes()).hexdigest()  # noqa: S324  (a git-style blob id)
