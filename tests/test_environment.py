"""requirements.txt (pip) and environment.yml (conda-forge) list the same packages and ranges."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONDA_NAME = {"cupy-cuda12x": "cupy"}  # conda-forge's cupy picks its CUDA build itself


def _split(spec):
    m = re.match(r"([A-Za-z0-9_.\-]+)\s*(.*)", spec.strip())
    return m.group(1).lower(), m.group(2).replace(" ", "")


def test_pip_and_conda_list_the_same_packages():
    pip = dict(_split(line) for line in (ROOT / "requirements.txt").read_text().splitlines()
               if line.strip() and not line.startswith("#"))
    conda = dict(_split(line.strip()[2:]) for line in (ROOT / "environment.yml").read_text().splitlines()
                 if line.strip().startswith("- ") and not line.strip()[2:].startswith(("conda-forge", "nvidia")))
    extra = {k for k in conda if k == "python" or k.startswith("cuda-")}  # conda also brings Python and nvcc
    assert {CONDA_NAME.get(k, k): v for k, v in pip.items()} == {k: v for k, v in conda.items() if k not in extra}
    for needed in ("jupyterlab", "cupy-cuda12x", "matplotlib", "ipywidgets", "nbval", "papermill"):
        assert needed in pip


def test_colab_pins_fit_the_requirements():
    """Colab's versions (constraints/colab.txt) are within requirements.txt's ranges: the course admits them."""
    from packaging.requirements import Requirement

    pins = dict(_split(line) for line in (ROOT / "constraints/colab.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#"))
    assert "Colab" in (ROOT / "constraints/colab.txt").read_text().split("\n")[0] + (ROOT / "constraints/colab.txt").read_text()
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            if req.name.lower() in pins:
                assert pins[req.name.lower()].startswith("==")
                assert req.specifier.contains(pins[req.name.lower()][2:]), f"{req} excludes Colab's {pins[req.name.lower()]}"
    for needed in ("ipywidgets", "ipython", "cupy-cuda12x", "numpy", "matplotlib", "ipykernel", "jupyter_client"):
        assert needed in pins


def test_conda_pins_cuda_12_like_cupy_cuda12x():
    env = (ROOT / "environment.yml").read_text()
    assert "- cuda-version>=12.0,<13" in env and "cupy-cuda12x" in (ROOT / "requirements.txt").read_text()


def test_notebooks_build_and_run_cuda_without_shell_lines():
    """A `!nvcc ...` or `!./prog` line fails silently under nbval: the course never uses one."""
    for folder in ("notebooks", "solutions", "labs"):
        for nb in (ROOT / folder).glob("*.ipynb"):
            for cell in json.loads(nb.read_text())["cells"]:
                lines = "".join(cell["source"]).splitlines()
                if cell["cell_type"] == "code" and not (lines and lines[0].startswith("%%writefile")):  # not CUDA's `!x`
                    assert not [ln for ln in lines if ln.lstrip().startswith("!")], f"{nb} has a ! shell line"
