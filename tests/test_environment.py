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


# -- the stacks table (streamalloc/stacks.py): every version-specific file agrees with it ----------------------------
def test_the_pinned_files_install_colabs_stack_and_name_the_reference_stack():
    from streamalloc import stacks
    colab, ref = stacks.COLAB, stacks.REFERENCE
    assert colab.cupy in (ROOT / "requirements.txt").read_text()
    assert f"cuda-version>={colab.cuda}.0,<{colab.cuda + 1}" in (ROOT / "environment.yml").read_text()
    assert colab.cupy in (ROOT / "constraints" / "colab.txt").read_text()
    frameworks = (ROOT / "requirements-frameworks.txt").read_text()
    for pinned in (colab.cuda_core, colab.rmm):  # installed lines
        assert any(line.startswith(pinned) for line in frameworks.splitlines()), pinned
    assert f'"{ref.cuda_core}>=0.3" {ref.rmm}' in frameworks  # what it says to install on the reference's stack


def test_every_recording_set_is_named_for_the_stack_it_was_recorded_with():
    """A set named <gpu>-cuda12 was recorded with cupy-cuda12x, a set without a stack's suffix with the reference's."""
    from streamalloc import replay, stacks
    suffixes = {s.recordings for s in stacks.STACKS.values() if s.recordings}
    for name in replay.available():
        stack = stacks.of_machine(replay.machine(name))
        base = name.removesuffix("-x2")  # the two-GPU supplement keeps its stack's naming
        assert (base.endswith(stack.recordings) if stack.recordings else not base.endswith(tuple(suffixes))), \
            f"{name} was recorded with {replay.machine(name).cupy_package}"
    record = (ROOT / "tools" / "record_reference.sh").read_text()
    for s in stacks.STACKS.values():
        assert s.recordings == "" or f'"$gpu{s.recordings}"' in record, s


def test_the_install_advice_follows_the_machines_stack():
    from streamalloc import gpu, lesson, stacks
    assert stacks.of_driver("12.4") is stacks.STACKS[12] and stacks.of_driver("13.0") is stacks.STACKS[13]
    assert stacks.of_driver(None) is stacks.COLAB and stacks.of_driver("11.8") is stacks.COLAB
    assert stacks.of_driver("14.1") is stacks.STACKS[stacks.NEWEST]  # a newer driver runs the newest stack
    cuda13 = gpu.Machine(driver_cuda="13.0")
    assert lesson.pip_name("rmm", stacks.of_machine(cuda13)) == "rmm-cu13"
    assert lesson.pip_name("cupy", stacks.of_machine(gpu.Machine(driver_cuda="13.0", cupy_package="cupy-cuda12x"))) \
        == "cupy-cuda12x"  # the CuPy a machine has decides its stack, before its driver
    assert lesson.pip_name("jax") == "jax[cuda12]" and lesson.pip_name("cuda.core.experimental") == "cuda-core[cu12]"
    assert gpu.stacks.cupy_packages()[:2] == ("cupy-cuda13x", "cupy-cuda12x")
    assert "(cupy-cuda12x)" in gpu._cupy_advice("12.4") and "(cupy-cuda13x)" in gpu._cupy_advice("13.0")
    assert gpu._cupy_advice("11.8").startswith("this driver supports CUDA 11.8, older than every CUDA the course runs "
                                               "on (12 and 13): update the driver")  # not: install cupy-cuda12x
