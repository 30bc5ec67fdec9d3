"""Generated files are what their scripts write: labs/ from solutions/, README.md's course map."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_labs_are_generated_from_solutions():
    done = subprocess.run([sys.executable, "tools/make_labs.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_readme_course_map_is_generated():
    done = subprocess.run([sys.executable, "tools/make_links.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_lab_stubs_replace_solution_regions():
    sys.path.insert(0, str(ROOT / "tools"))
    import make_labs

    src = ("int a;\n    // BEGIN SOLUTION (stub: // TODO: allocate)\n    CHECK(cudaMallocAsync(&p, n, s));\n"
           "    // END SOLUTION\nx = 1\n# BEGIN SOLUTION\ny = 2\n# END SOLUTION\n")
    assert make_labs.strip_code(src, "t") == "int a;\n    // TODO: allocate\nx = 1\n# TODO: write this part"
    with pytest.raises(ValueError, match="never closed"):
        make_labs.strip_code("# BEGIN SOLUTION\nx = 1\n", "t")


# The set-up lines themselves, on and off a faked Colab: tests/test_colab_setup.py
