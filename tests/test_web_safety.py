"""What a recording holds reaches a reader's browser only as text: the Markdown and HTML a lesson writes from recorded
values (08's allocator names, 02's sanitizer report, the machine's label) and the site's pages (an image output's
metadata, the banner), with markup escaped exactly once."""
import json
import re

import mistune
import nbformat

from test_nb08_real_workloads import toy
from test_site import course, live_handler  # noqa: F401  (course: the site's canned run, a fixture)

from streamalloc import plots, replay, sanitizer, site
from streamalloc.course import RECORDINGS
from streamalloc.traces import built_to_fragment
from streamalloc.lessons import api_fundamentals as A
from streamalloc.lessons import real_workloads as W

BAD = '<img src=x onerror="alert(1)"> [link](javascript:alert(2)) `x` <script>alert(3)</script>'


def rendered(markdown: str) -> str:
    """Markdown as a notebook front end renders it: raw HTML passed through, as JupyterLab's marked does."""
    return mistune.create_markdown(escape=False)(markdown)


def harmless(html: str) -> bool:
    return not live_handler(html) and "<script" not in html and "<img" not in html and 'href="javascript' not in html


def test_the_helpers_keep_a_crafted_value_as_text():
    assert harmless(rendered(plots.md(BAD))) and harmless(rendered(plots.code(BAD)))
    assert "alert(1)" in rendered(plots.md(BAD)) and "alert(1)" in rendered(plots.code(BAD))  # shown, not dropped
    assert plots.md("PyTorch native") == "PyTorch native" and plots.code("kernel") == "`kernel`"
    # a line break in a value would let the rest start a block of raw HTML
    assert harmless(rendered(f"- {plots.code('a' + chr(10) * 2 + '<script>x</script>')}"))


def test_08s_conclusion_writes_recorded_allocator_names_as_text():
    t = built_to_fragment()
    recs = [{**toy(t, name, "python", keep, us), "trace": t.name, "process": "p"} for name, keep, us in
            (("one buffer (loop)", True, 100.0), (BAD, False, 300.0), ("CuPy MemoryPool", True, 200.0))]
    text = W.conclusion(recs, t, '<b onmouseover="x">GPU</b>')
    assert BAD[:4] not in text and harmless(rendered(text)) and "alert(1)" in text


def test_02s_sanitizer_text_is_written_as_text():
    L = sanitizer.LINE
    out = "\n".join([f"{L} Invalid __global__ read {BAD}", f"{L}     Address 0x1 <script>alert(4)</script>",
                     f"{L} Invalid __global__ write ``` <img src=x onerror=alert(5)>",
                     f"{L}     at race.cu:10 in k`<img src=x onerror=alert(6)>`", f"{L} ERROR SUMMARY: 2 errors",
                     "race.cu:12 failed: `<script>alert(7)</script>"])
    report = sanitizer.parse(out)
    text = A.what_the_reports_hold({("before-alloc", "racy"): report}).data
    assert harmless(rendered(text)) and "alert(4)" in text and "alert(7)" in text
    racy = {"errors": "<script>alert(8)</script>", "n": 4, "first_wrong": BAD, "ok": False, "same_address": True,
            "reserved_before": 8, "bytes": 8, "threshold": "<i onclick=x>0</i>"}
    assert harmless(rendered(A.race_text({(s, "racy"): racy for s in ("before-alloc", "after-free")}).data))
    assert harmless(rendered(A.default_threshold_text({**racy, "first_wrong": 9}, racy).data))


def test_a_table_escapes_a_label_once():
    """A label made of values replay.plain escaped shows as itself, not as &amp;lt; (escaped twice)."""
    label = replay.plain("<GPU> & co") + ", replayed"
    html = plots.Table([{"allocator": BAD}], label)._repr_html_()
    assert "&amp;lt;" not in html and "&lt;GPU&gt; &amp; co" in html and harmless(html)


def test_the_site_drops_an_images_metadata_and_escapes_the_banner_once(course, tmp_path, monkeypatch):  # noqa: F811
    repo, executed, out = course
    rec = tmp_path / "recordings" / "crafted"
    rec.mkdir(parents=True)
    good = json.loads((RECORDINGS / replay.DEFAULT_REFERENCE / "machine.json").read_text())
    (rec / "machine.json").write_text(json.dumps({**good, "gpu": "<b>GPU</b>"}))
    monkeypatch.setenv("STREAMALLOC_RECORDINGS", str(rec.parent))
    monkeypatch.setenv("STREAMALLOC_REFERENCE", "crafted")
    path = executed / "notebooks" / "03_pools.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    nb.cells[-1].outputs[0]["metadata"] = {"image/png": {"width": "1 onerror=alert(9)"}, "width": "2 onload=alert(9)"}
    nbformat.write(nb, str(path))
    site.build(executed, out, repo)
    page = (out / "notebooks" / "03_pools.html").read_text()
    assert "alert(9)" not in page and not live_handler(page)
    banner = re.search(r'id="replay-banner">(.*?)</div>', page, re.S).group(1)
    assert "<b>&lt;b&gt;GPU&lt;/b&gt;</b>" in banner and "&amp;lt;" not in banner
