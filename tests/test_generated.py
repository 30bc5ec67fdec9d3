"""Generated files are what their scripts write: labs/ from solutions/ (a lab its learner solved in place is
compared as git tracks it), README.md's course map, the notebooks' set-up lines and notebook 00's "What next"
table."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_labs_are_generated_from_solutions():
    import make_labs
    from labcheck import unsolved

    want = make_labs.expected()
    have = {p: unsolved(p) for p in (ROOT / "labs").glob("*.ipynb")}
    # a lab solved in place with no git copy of it as given (None) cannot be compared: it is left out
    stale = sorted({p.name for p in want if have.get(p, "") not in (want[p], None)}
                   | {p.name for p in have if p not in want})
    assert not stale, f"labs/ is not what tools/make_labs.py writes from solutions/ (run `make labs`): {stale}"


def test_readme_course_map_and_the_notebooks_links_are_generated():
    done = subprocess.run([sys.executable, "tools/make_links.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_notebook_00s_what_next_table_lists_every_other_lecture_and_every_lab(monkeypatch):
    """The table is make_links.py's: each other lecture and each lab by its title, in the course map's order. A
    notebook renamed or added makes it stale (and --check fails); a table edited by hand is not overwritten."""
    import nbformat

    import make_links

    path = ROOT / "notebooks" / "00_setup.ipynb"
    text = path.read_text()
    cell = next(c for c in nbformat.reads(text, as_version=4).cells if make_links.NEXT_START in c.source)
    rows = [line for line in cell.source.splitlines() if line.startswith("| ") and "·" in line]
    others = [nb for nb in sorted((ROOT / "notebooks").glob("*.ipynb")) if nb != path]
    assert rows == [f"| {make_links.title(nb)} |" for nb in others + sorted((ROOT / "labs").glob("*.ipynb"))]
    assert make_links.with_next(text, "00") == text
    with pytest.raises(make_links.HandEdited, match="--force"):
        make_links.with_next(text.replace("| lecture |", "| lesson |", 1), "00")
    with pytest.raises(ValueError, match="no Markdown cell with the markers"):
        make_links.with_next(text.replace(make_links.NEXT_START, "<!-- -->"), "00")
    monkeypatch.setattr(make_links, "title", lambda nb: f"renamed {nb.stem}")
    assert make_links.expected()[path] != text and "| renamed 01_sync_vs_async |" in make_links.expected()[path]


def test_readme_tells_a_learner_first_and_the_archive_size_make_dist_writes(tmp_path):
    """README.md: the archive's size as `make dist` writes it now (within 10%); how a learner opens, runs and solves a
    lab before CI's timings; the authors' rule about labs/ under Layout, where authors read."""
    import re

    import make_dist

    readme = (ROOT / "README.md").read_text()
    mib = make_dist.build(tmp_path, allow_edits=True).stat().st_size / 2**20
    said = [float(x) for x in re.findall(r"(?:archive is|what git tracks,) about (\d+(?:\.\d+)?) MiB", readme)]
    assert len(said) == 2 and all(abs(x - mib) <= 0.1 * mib for x in said), (said, f"{mib:.2f} MiB")
    assert "under 1 MiB" not in readme
    order = [readme.index(h) for h in ("## Opening it", "## Working through a lab", "## The two commands",
                                      "## Timings, and CI", "## Layout")]
    assert order == sorted(order), "the learner's path comes before CI's details"
    assert "in place" in readme[order[1]:order[2]], "the README says plainly that a lab is solved in place"
    assert readme.index("edit the solutions, never the labs") > order[-1], "the authors' rule is under Layout"


def test_lab_stubs_replace_solution_regions():
    import make_labs

    src = ("int a;\n    // BEGIN SOLUTION (stub: // TODO: allocate)\n    CHECK(cudaMallocAsync(&p, n, s));\n"
           "    // END SOLUTION\nx = 1\n# BEGIN SOLUTION\ny = 2\n# END SOLUTION\n")
    assert make_labs.strip_code(src, "t") == "int a;\n    // TODO: allocate\nx = 1\n# TODO: write this part"
    with pytest.raises(ValueError, match="never closed"):
        make_labs.strip_code("# BEGIN SOLUTION\nx = 1\n", "t")



def test_a_lab_solved_in_place_keeps_make_test_green(tmp_path):
    """A learner solves lab 1 in its own notebook and saves it with outputs: in a copy of this checkout (HEAD, with the
    working tree's changes), the tests that need the unsolved lab read it as git tracks it, and nbval runs the solved
    lab, whose check now raises nothing."""
    import nbformat

    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: this test copies the course with git")
    course = tmp_path / "course"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(course)], check=True)
    changed = subprocess.run(["git", "ls-files", "-z", "-m", "-o", "--exclude-standard"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    for rel in filter(None, set(changed.split("\0"))):
        if (ROOT / rel).is_file():
            (course / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, course / rel)
    lab = course / "labs" / "lab1_stream_ordered.ipynb"
    nb, solution = (nbformat.read(str(p), as_version=4) for p in (lab, course / "solutions" / lab.name))
    assert len(nb.cells) == len(solution.cells)
    for mine, theirs in zip(nb.cells, solution.cells):
        if mine.cell_type == "code":
            mine.source, mine.execution_count = theirs.source, 1
            mine.outputs = [nbformat.v4.new_output("stream", text="ran\n")]
    nbformat.write(nb, str(lab))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "tests/test_generated.py", "tests/test_make_labs.py", "tests/test_notebook_format.py",
                           "tests/test_lab1_stream_ordered.py::TestProtocol::test_the_lab_as_given_is_rejected",
                           "labs/lab1_stream_ordered.ipynb",
                           "--deselect", "tests/test_generated.py::test_a_lab_solved_in_place_keeps_make_test_green"],
                          cwd=course, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert " passed" in last and "skipped" not in last, done.stdout[-2000:]


# The set-up lines themselves, on and off a faked Colab: tests/test_colab_setup.py
