"""The instructor's view: every learner's build/summary.md on one page, at /services/summaries/ on the hub.

A service the hub starts (jupyterhub_config.py), run as the hub's user (root with system users), so it reads every
learner's copy where the course's runner writes its summary (HOMES/<learner>/stream-ordered-allocator/build/
summary.md). Reading them where they are needs nothing from the learners and no folder they could all write to. Only
users with the scope access:services!service=summaries get in: in JupyterHub 5 the admin role has it, a learner's
role does not.

Everything on that path is the learner's to change, so nothing of it is followed as root: each component is opened
below the one before (openat) without following a link (O_NOFOLLOW), every folder and the summary must belong to the
home's owner, the summary must be a regular file, and at most LIMIT bytes of it are read. A summary that breaks a rule
is not shown; the page says why. Its Markdown is rendered and then sanitized by the read-ahead site's sanitizer
(streamalloc.site.clean), like any text a learner wrote. The instructor's own copy is not a learner's.
"""
import errno
import html
import json
import os
import stat
import sys
from pathlib import Path
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from jupyterhub.utils import url_path_join
from tornado import ioloop, web

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # the course's package: its one sanitizer
from spawn_hook import COURSE_DIR  # noqa: E402
from streamalloc import verdict  # noqa: E402
from streamalloc.site import clean  # noqa: E402

LIMIT = 64 * 1024  # a summary is a few KiB; a larger one is cut (a sparse file of gigabytes costs nothing)
CUT = "\n\n(cut: only its first 64 KiB are shown)"
FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO does not hang the page


class Refused(Exception):
    """A summary not shown, and why (a link, not a regular file, not the learner's own)."""


def _open(parent: int, name: str, flags: int, owner: int | None, what: str) -> int:
    """`name` below the open folder `parent`, never through a link; it must belong to `owner` (when given)."""
    try:
        fd = os.open(name, flags, dir_fd=parent)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):  # a link (O_NOFOLLOW), or not a folder
            raise Refused(f"{what} is a link or not a folder; not followed") from None
        raise
    info = os.fstat(fd)
    if owner is not None and info.st_uid != owner:
        os.close(fd)
        raise Refused(f"{what} does not belong to the learner; not read")
    return fd


def read_summary(home: int, name: str = "summary.md") -> str:
    """The runner's file `name` (summary.md, summary.json) under the open home folder `home` ("" where nothing has
    run yet); Refused where it breaks a rule. FileNotFoundError where the home holds no copy of the course."""
    owner = os.fstat(home).st_uid
    fds = [_open(home, COURSE_DIR, FOLDER, owner, COURSE_DIR)]
    try:
        try:
            fds.append(_open(fds[-1], "build", FOLDER, owner, f"{COURSE_DIR}/build"))
            fds.append(_open(fds[-1], name, FILE, owner, f"{COURSE_DIR}/build/{name}"))
        except FileNotFoundError:
            return ""
        if not stat.S_ISREG(os.fstat(fds[-1]).st_mode):
            raise Refused(f"{COURSE_DIR}/build/{name} is not a regular file; not read")
        data = os.read(fds[-1], LIMIT + 1)
        text = data[:LIMIT].decode(errors="replace")
        return text + CUT if len(data) > LIMIT else text
    finally:
        for fd in fds:
            os.close(fd)


def lab_words(text: str) -> dict[str, list[str]]:
    """{word: [lab, ...]} from the runner's summary.json: each edited lab by its check's verdict, the word the runner
    read as data (streamalloc.verdict), never from its prose; {} where there is none (or it is cut or not JSON)."""
    try:
        rows = json.loads(text) if text else []
    except ValueError:
        rows = []
    return verdict.of_rows(rows if isinstance(rows, list) else [])


def summaries(homes: Path, instructor: str | None = None, words: dict | None = None) -> dict[str, str | Refused]:
    """{learner: their summary.md, "" where nothing has run yet, or Refused}, for every home holding a copy of the
    course, the instructor's excepted; `words`, when given, gets {learner: lab_words(their summary.json)}, read by
    the same rules."""
    found = {}
    words = {} if words is None else words
    top = os.open(homes, FOLDER)
    try:
        for name in sorted(os.listdir(top)):
            if name == instructor:
                continue
            try:
                home = os.open(name, FOLDER, dir_fd=top)
            except OSError:  # a link or a file among the homes: nobody's home
                continue
            try:
                found[name] = read_summary(home)
                try:
                    words[name] = lab_words(read_summary(home, "summary.json"))
                except (Refused, OSError):  # the page shows the summary without its lab words
                    words[name] = {}
            except FileNotFoundError:  # no copy: not a learner of this course
                pass
            except Refused as e:
                found[name] = e
            except OSError as e:
                found[name] = Refused(f"not readable: {e.strerror or e}")
            finally:
                os.close(home)
    finally:
        os.close(top)
    return found


def render(markdown: str) -> str:
    """A summary as HTML: its Markdown table rendered (the runner writes <br> in a cell for a line break), then
    sanitized: what a learner wrote there is shown, never run."""
    import mistune

    return clean(mistune.create_markdown(escape=False, plugins=["table"])(markdown))


def page(found: dict[str, str | Refused], words: dict | None = None) -> str:
    parts = [f"<h1>The room: {len(found)} learner{'s' if len(found) != 1 else ''}</h1>",
             "<p>Each summary is the learner's own run, as their copy reports it (<code>build/summary.md</code>): a "
             "lab <b>solved</b> there is one whose check passed in that run, which the learner could have edited; "
             "it is not a grade.</p>"]
    for name, summary in found.items():
        parts.append(f"<h2 id='{html.escape(name)}'>{html.escape(name)}</h2>")
        said = "; ".join(f"{w}: {', '.join(Path(nb).stem for nb in nbs)}" for w, nbs in (words or {}).get(name, {}).items())
        if said:
            parts.append(f"<p>Labs: {html.escape(said)}</p>")
        if isinstance(summary, Refused):
            parts.append(f"<p class='refused'>Not shown: {html.escape(str(summary))}.</p>")
        elif summary:
            parts.append(render(summary))
        else:
            parts.append("<p>No summary yet: nothing run with <code>python -m streamalloc run</code> (or "
                         "<code>make course</code>) in this copy.</p>")
    return "<!doctype html><meta charset='utf-8'><title>Summaries</title>" + "\n".join(parts)


class Summaries(HubOAuthenticated, web.RequestHandler):
    @web.authenticated
    def get(self):
        words = {}
        found = summaries(Path(os.environ.get("WORKSHOP_HOMES", "/home")), os.environ.get("WORKSHOP_INSTRUCTOR"), words)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(page(found, words))


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
