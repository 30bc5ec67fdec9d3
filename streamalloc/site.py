"""The read-ahead copy: the course, executed in replay, as static web pages (nbconvert's HTML exporter).

    make site                      # = python -m streamalloc run (replay), then python -m streamalloc.site

It reads the executed notebooks that `python -m streamalloc run` left in build/executed/ (refusing a live or
failed run: every page here is a replay of the reference recording) and writes build/site/: index.html (the
README's course map, linking the pages), one page per lecture, lab (unsolved, as a learner gets it, linked
to its solution) and solution. Every page carries a banner naming the reference machine
(recordings/<gpu>/machine.json); the figures say the same at their foot. The pages load nothing from the
network: widgets show the image of their default setting, with a note that their controls need a running
notebook, and no require.js or MathJax is linked. Everything a notebook shows is sanitized (`clean`: bleach,
which nbconvert brings, with the tags a lesson's Markdown and tables use: no script, no style, no event handler,
no javascript: link), and every value the site writes itself is escaped. A cell whose error is intended (tagged raises-exception) is marked as such, without papermill's red
banner; a notebook the run did not measure (it needs two GPUs) says so in its banner.
"""
from __future__ import annotations

import argparse
import html
import json
import re
import sys
from pathlib import Path

from . import plots, replay, runner
from .course import REPO, own_notebooks

EXECUTED = REPO / "build" / "executed"
OUT = REPO / "build" / "site"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
CUDA_CELL = re.compile(r"%%writefile\s+(?:-a\s+)?\S+\.(?:cu|cuh|cpp|h)\s*\n")
WRITTEN = re.compile(r"^(Writing|Overwriting|Appending to) \S*/([^/\s]+)$", re.M)  # %%writefile's line
SHOWN = {"text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg"}  # all else is dropped
WIDGET_NOTE = ("*In a running notebook (Jupyter or Colab) the controls of this explorer appear here and redraw the "
               "plot; this read-ahead copy cannot run it, and shows the plot of their default setting above.*")

TEMPLATE = """\
{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block body_header -%}
{{ super() }}
{{ resources.site_header }}
{%- endblock body_header -%}
"""
STYLE = """<style>
.site-banner { font-family: system-ui, sans-serif; margin: 0 0 1em; padding: .7em 1em; background: #fff7e0;
  border: 1px solid #e0b84a; border-radius: 6px; font-size: 14px; }
.site-nav { font-family: system-ui, sans-serif; font-size: 14px; margin: .5em 0; }
.site-nav a { margin-right: 1.2em; }
</style>"""


# what a page may show of a notebook's Markdown and HTML outputs: the tags Markdown and the course's tables make
TAGS = ["a", "abbr", "b", "blockquote", "br", "caption", "code", "dd", "del", "details", "div", "dl", "dt", "em",
        "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "s", "small", "span",
        "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul"]
ATTRIBUTES = {"*": ["class", "id", "title"], "a": ["href", "title"], "img": ["src", "alt", "width", "height"],
              "td": ["colspan", "rowspan", "align"], "th": ["colspan", "rowspan", "align"]}


# the site's own markup (page_header, the index): a notebook may not name it, or it could pass for the site's banner
SITE_NAMES = re.compile(r"(^|\s)(site-[\w-]*|replay-banner|solution-link)(\s|$)", re.I)


def _allowed(tag: str, name: str, value: str) -> bool:
    value = html.unescape(value)  # as the browser reads it: bleach hands the entities over as they are written
    if tag == "img" and name == "src":  # an image inline (data:image/...) or beside the page; nothing else: no
        # scheme, and no "//host" or "\\host" (a browser reads both as another host, with the page's scheme)
        src = re.sub(r"[\t\n\r]", "", value).lstrip("".join(map(chr, range(33))))  # as a browser's URL parser does
        return src.startswith("data:image/") or not re.match(r"[a-z][a-z0-9+.-]*:|[/\\]{2}", src, re.I)
    if name in ("class", "id") and SITE_NAMES.search(value):
        return False
    return name in ATTRIBUTES.get(tag, []) or name in ATTRIBUTES["*"]


def clean(markup) -> str:
    """HTML from a notebook (its Markdown, rendered, and its HTML and Markdown outputs), safe to publish: only TAGS
    and their harmless attributes stay, links only to http(s), mailto and the page's own anchors; anything else
    shows as text (bleach). An image loads nothing from the network, and no class or id names the site's own markup
    (SITE_NAMES: a notebook's div of class site-banner would pass for the page's banner)."""
    import bleach

    markup = markup.decode() if isinstance(markup, bytes) else str(markup)
    return bleach.clean(markup, tags=TAGS, attributes=_allowed, protocols=["http", "https", "mailto"],
                        strip_comments=True)


class SiteError(Exception):
    """The executed course cannot be published: what is wrong, and what to run."""


def reference_machine() -> dict:
    name = replay.reference()
    if not name:
        raise SiteError("recordings/ holds no reference recording, so there is nothing to replay")
    return replay.machine(name).to_dict()


def banner(m: dict) -> str:
    e = plots.text  # escaped once: replay.machine has escaped them already, and twice shows &amp;lt;
    return (f"Read-ahead copy, executed in <b>replay</b>: every number and figure on this page was measured by the "
            f"course's own code on <b>{e(m.get('gpu'))}</b> (driver {e(m.get('driver'))}, "
            f"CUDA {e(m.get('driver_cuda'))}, nvcc {e(m.get('nvcc'))}, recorded "
            f"{e(m.get('date'))}) and replayed here. Run the notebook on a GPU to measure your own.")


def course(repo: Path = REPO) -> list[str]:
    """The course's notebooks, as the runner names them: notebooks/..., solutions/..., labs/... (.ipynb)."""
    return [nb.relative_to(repo).as_posix() for nb in own_notebooks(repo)]


def check_run(executed: Path, wanted: list[str]) -> list[dict]:
    """The run's summary, if every wanted notebook ran in replay and passed; else SiteError."""
    summary = executed.parent / "summary.json"
    if not summary.is_file():
        raise SiteError(f"{summary} is missing: run the course in replay first "
                        "(STREAMALLOC_MODE=replay python -m streamalloc run, or `make site`)")
    try:
        rows = {r["notebook"]: r for r in json.loads(summary.read_text())}
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise SiteError(f"{summary} cannot be read ({e}): run the course in replay again (`make site`)") from None
    missing = [nb for nb in wanted if nb not in rows or not (executed / nb).is_file()]
    live = [nb for nb in wanted if nb in rows and rows[nb]["mode"] != "replay"]
    failed = [f"{nb} ({rows[nb]['error']})" for nb in wanted
              if nb in rows and rows[nb]["result"] not in ("passed", runner.NOT_MEASURED)]
    problems = ([f"not run: {', '.join(missing)}"] if missing else []) + (
        [f"run live, not in replay: {', '.join(live)}"] if live else []) + ([f"failed: {'; '.join(failed)}"] if failed else [])
    if problems:
        raise SiteError("the read-ahead copy is built from a complete, passing replay run of the course; "
                        + "; ".join(problems) + ". Run `STREAMALLOC_MODE=replay python -m streamalloc run` (or `make site`)")
    return [rows[nb] for nb in wanted]


def static(nb):
    """The notebook as a page shows it: without live widgets (their views go, the image of the default setting
    beside each stays, and a note says that the controls need a running notebook), without papermill's error
    banners, each intended error marked as intended, only outputs of the types in SHOWN, and no output metadata
    (the page's template writes an image's width into its tag unquoted: a value there could add an attribute)."""
    import nbformat

    nb.metadata.pop("widgets", None)
    cells = []
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if "papermill-error-cell-tag" in tags:
            continue  # the run passed (check_run), so every error left is one that a cell is meant to raise
        outputs = cell.get("outputs", []) if cell.cell_type == "code" else []
        if cell.cell_type == "code" and CUDA_CELL.match(cell.source):
            cell.metadata["magics_language"] = "cuda"  # nbconvert highlights the cell as CUDA C++, not as Python
        widget = False
        for o in outputs:
            if o.get("output_type") == "stream" and cell.source.startswith("%%writefile"):
                # "Writing /home/.../build/.../run-<pid>-<token>/x.cu": the builder's folders say nothing to a reader
                o["text"] = WRITTEN.sub(r"\1 \2", o.get("text", ""))
            data = o.get("data", {})
            widget = widget or WIDGET_VIEW in data
            if "metadata" in o:
                o["metadata"] = {}
            for mime in [m for m in data if m not in SHOWN or (m == "text/plain" and WIDGET_VIEW in data)]:
                del data[mime]  # a widget's text/plain is its repr (VBox(children=...), Output()): not for a reader
        if outputs:  # an output left with nothing to show goes (nbconvert would warn of "mimetype(s) dict_keys([])")
            cell.outputs = [o for o in outputs if o.get("output_type") not in ("display_data", "execute_result")
                            or o.get("data")]
        error = next((o for o in outputs if o.get("output_type") == "error"), None)
        if error is not None and "raises-exception" in tags:
            cells.append(nbformat.v4.new_markdown_cell(
                f"**The error below is intended**: this cell is meant to raise `{error.get('ename', 'an error')}` "
                "(it is tagged `raises-exception`), and the run checked that it does."))
        cells.append(cell)
        if widget:
            cells.append(nbformat.v4.new_markdown_cell(WIDGET_NOTE))
    nb.cells = cells
    return nb


def strip_comments(markdown: str) -> str:
    """Markdown without its HTML comments (the course map's markers), which the page would show as text."""
    return re.sub(r"<!--.*?-->[ \t]*\n?", "", markdown, flags=re.S)


def index_map(readme: str, published: list[str]) -> str:
    """README's course map, linking the pages of this copy instead of the .ipynb files (Colab by a plain link);
    a notebook not published here keeps its title, without a link."""
    m = re.search(r"<!-- COURSE MAP[^>]*-->(.*?)<!-- END COURSE MAP -->", readme, re.S)
    if not m:
        raise SiteError("README.md has no course map between its COURSE MAP markers")
    text = re.sub(r"\[!\[Open In Colab\]\([^)]*\)\]\(([^)]*)\)", r"[Colab](\1)", m.group(1))
    def link(m):
        return f"[{m.group(1)}]({m.group(2)}.html)" if m.group(2) + ".ipynb" in published else m.group(1)

    return re.sub(r"\[([^\]]*)\]\(((?:notebooks|labs|solutions)/[^)]+)\.ipynb\)", link, text)


def intro(readme: str) -> str:
    """README's first paragraphs: the title and what the course is, up to its first section."""
    return readme.split("\n## ", 1)[0]


def page_header(rel: str, m: dict, pages: list[str], row: dict | None = None) -> str:
    """A page's navigation and banner; `rel` is its path in the site (labs/lab1.html, notebooks/more/x.html)."""
    depth = "../" * rel.count("/")
    nav = [f'<a href="{depth}index.html">course map</a>']
    folder, stem = rel.split("/", 1)[0], rel.split("/", 1)[1][:-len(".html")]
    same = [p for p in pages if p.startswith(folder + "/")]
    i = same.index(rel)
    if i > 0:
        nav.append(f'<a href="{depth}{same[i - 1]}">previous</a>')
    if i + 1 < len(same):
        nav.append(f'<a href="{depth}{same[i + 1]}">next</a>')
    note = ""
    if row and row.get("result") == runner.NOT_MEASURED:
        note += (f" <b>Not measured</b>: {plots.text(row.get('error') or 'needs two GPUs')}. Nothing on this "
                 "page was measured; its programs are shown, not run.")
    if folder == "labs":
        if f"solutions/{stem}.html" in pages:
            nav.append(f'<a href="{depth}solutions/{stem}.html" id="solution-link">the solution</a>')
        note += (" This lab is shown <b>unsolved</b>, as a learner gets it: its check says what is still missing. "
                "Its solution is a link above.")
    elif folder == "solutions":
        if f"labs/{stem}.html" in pages:
            nav.append(f'<a href="{depth}labs/{stem}.html">the lab, unsolved</a>')
        note += " This is a lab's <b>solution</b>."
    return (f'{STYLE}<nav class="site-nav">{" ".join(nav)}</nav>'
            f'<div class="site-banner" id="replay-banner">{banner(m)}{note}</div>')


def _course_path(p, repo: Path) -> str:
    """A notebook named on the command line as the runner names it (notebooks/03_pools.ipynb, or deeper)."""
    path = Path(p).resolve() if Path(p).is_absolute() else Path(p)
    if path.is_absolute() and not path.is_relative_to(repo):
        raise SiteError(f"{p} is not in the course ({repo}): name a notebook under notebooks/, solutions/ or labs/")
    rel = path.relative_to(repo) if path.is_absolute() else path
    if len(rel.parts) < 2 or rel.suffix != ".ipynb" or ".." in rel.parts:
        raise SiteError(f"{p} is not a notebook of the course: name one as notebooks/03_pools.ipynb")
    return rel.as_posix()


def refuse_edited(wanted: list[str], repo: Path = REPO) -> None:
    """SiteError where a lab to publish is edited in place: the copy shows labs unsolved, as learners get them."""
    edited = runner.edited_labs(wanted, repo)
    if edited:
        raise SiteError(f"{runner.edited_said(edited)} and run make site again, or publish only the lessons (python -m "
                        "streamalloc.site notebooks/...): the read-ahead copy shows labs unsolved, as learners get them.")


def build(executed: Path = EXECUTED, out: Path = OUT, repo: Path = REPO, only=()) -> Path:
    """Write the site under out/ and return its index: every notebook of the course, or only those named
    (as the runner names them: notebooks/03_pools.ipynb). A lab edited in place is refused (refuse_edited)."""
    import mistune
    import nbformat
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    executed, out = Path(executed), Path(out)
    wanted = [_course_path(p, repo) for p in only] or course(repo)
    refuse_edited(wanted, repo)
    rows = dict(zip(wanted, check_run(executed, wanted)))
    m = reference_machine()
    exporter = HTMLExporter(template_name="lab", extra_loaders=[DictLoader({"site.html.j2": TEMPLATE})],
                            template_file="site.html.j2", sanitize_html=True, filters={"clean_html": clean})
    pages = [nb[:-len(".ipynb")] + ".html" for nb in wanted]
    for rel in pages:
        name = rel[:-len(".html")] + ".ipynb"
        nb = static(nbformat.read(str(executed / name), as_version=4))
        header = page_header(rel, m, pages, rows[name])
        title = next((line[2:].replace("`", "") for c in nb.cells if c.cell_type == "markdown"
                      for line in c.source.splitlines() if line.startswith("# ")), Path(name).stem)  # its heading
        body, _ = exporter.from_notebook_node(nb, resources={"site_header": header,
                                                             "metadata": {"name": title}})  # the template escapes it
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(body)
    readme = (repo / "README.md").read_text()
    md = mistune.create_markdown(plugins=["table"])  # escape=True: the README's own HTML shows as text
    index = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>The stream-ordered memory allocator, measured: read-ahead copy</title>
{STYLE}
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; padding: 0 1em; line-height: 1.45; }}
table {{ border-collapse: collapse; margin: 1em 0; }} td, th {{ border: 1px solid #ccc; padding: .3em .7em; text-align: left; }}
</style></head><body>
<div class="site-banner" id="replay-banner">{banner(m)}</div>
{md(strip_comments(intro(readme)))}
<h2>Course map</h2>
{md(strip_comments(index_map(readme, wanted)))}
<p>Labs are shown unsolved, as a learner gets them, each with its solution beside it.</p>
</body></html>
"""
    (out / "index.html").write_text(index)
    return out / "index.html"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m streamalloc.site", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--executed", default=str(EXECUTED), help="the executed notebooks (default: build/executed)")
    p.add_argument("--out", default=str(OUT), help="where to write the site (default: build/site)")
    p.add_argument("only", nargs="*", help="publish only these notebooks (default: the whole course)")
    p.add_argument("--edits-only", action="store_true", help="only refuse labs edited in place, publishing nothing "
                                                            "(make site asks this before it runs the course)")
    a = p.parse_args(argv)
    try:
        if a.edits_only:
            refuse_edited([_course_path(x, REPO) for x in a.only] or course(REPO))
            return 0
        index = build(Path(a.executed), Path(a.out), only=a.only)
    except SiteError as e:
        print(f"make site: {e}", file=sys.stderr)
        return 1
    print(f"the read-ahead copy: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
