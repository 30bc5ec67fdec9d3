"""The instructor's view: every learner's build/summary.md on one page, at /services/summaries/ on the hub.

A service the hub starts (jupyterhub_config.py), run as the hub's user, so it reads every learner's copy where the
course's runner writes its summary (HOMES/<learner>/stream-ordered-allocator/build/summary.md). Reading them where
they are needs nothing from the learners and no folder they could all write to. Only users with the scope
access:services!service=summaries get in: in JupyterHub 5 the admin role has it, a learner's role does not.
"""
import html
import json
import os
import sys
from pathlib import Path
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from jupyterhub.utils import url_path_join
from tornado import ioloop, web

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # the course this page comes with
from spawn_hook import COURSE_DIR  # noqa: E402
from streamalloc import verdict  # noqa: E402


def summaries(homes: Path) -> dict[str, str]:
    """{learner: their summary.md}, for every home holding a copy of the course; "" where nothing has run yet."""
    found = {}
    for copy in sorted(homes.glob(f"*/{COURSE_DIR}")):
        summary = copy / "build" / "summary.md"
        found[copy.parent.name] = summary.read_text(errors="replace") if summary.is_file() else ""
    return found


def labs(homes: Path) -> dict[str, dict]:
    """{learner: {word: [lab, ...]}}: each learner's edited labs by their check's verdict, the word the runner read as
    data (streamalloc.verdict) into build/summary.json; {} where there is none yet."""
    found = {}
    for copy in sorted(homes.glob(f"*/{COURSE_DIR}")):
        try:
            rows = json.loads((copy / "build" / "summary.json").read_text())
        except (OSError, ValueError):
            rows = []
        found[copy.parent.name] = verdict.of_rows(rows if isinstance(rows, list) else [])
    return found


class Summaries(HubOAuthenticated, web.RequestHandler):
    @web.authenticated
    def get(self):
        homes = Path(os.environ.get("WORKSHOP_HOMES", "/home"))
        found, words = summaries(homes), labs(homes)
        parts = [f"<h1>The room: {len(found)} learner{'s' if len(found) != 1 else ''}</h1>"]
        for name, md in found.items():
            parts.append(f"<h2 id='{html.escape(name)}'>{html.escape(name)}</h2>")
            said = "; ".join(f"{w}: {', '.join(Path(nb).stem for nb in nbs)}" for w, nbs in words.get(name, {}).items())
            if said:
                parts.append(f"<p>Labs: {html.escape(said)}</p>")
            parts.append(f"<pre>{html.escape(md)}</pre>" if md else "<p>No summary yet: nothing run with "
                         "<code>python -m streamalloc run</code> (or <code>make course</code>) in this copy.</p>")
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write("<!doctype html><meta charset='utf-8'><title>Summaries</title>" + "\n".join(parts))


def main():
    prefix = os.environ["JUPYTERHUB_SERVICE_PREFIX"]
    app = web.Application([(prefix, Summaries), (url_path_join(prefix, "oauth_callback"), HubOAuthCallbackHandler)],
                          cookie_secret=os.urandom(32))
    url = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    app.listen(url.port, url.hostname)
    try:
        ioloop.IOLoop.current().start()
    except KeyboardInterrupt:  # the hub stops its services with SIGINT
        pass


if __name__ == "__main__":
    main()
