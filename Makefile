# The course's two commands (README.md):  make course  runs every notebook;  make test  runs the tests.
# Both set up a virtual environment in .venv first. On a machine whose Python already has the packages,
# skip that with PYTHON=python3 (for example: make test PYTHON=python3).
# CI (.ci/run) adds: make colab-test (run as on Colab, Colab's package set) and make compile-matrix.
# `make help` lists every target with what it does (the ## comments below).
VENV   ?= .venv
PYTHON ?= $(VENV)/bin/python
SETUP  := $(if $(filter $(VENV)/bin/python,$(PYTHON)),$(VENV)/.installed)
COLAB_VENV ?= build/venv-colab
# the Colab tier's Python: Colab's 3.12, found or installed by tests/colab/colab_python.sh (which says so when it can
# only offer another version); COLAB_PYTHON=/path/to/python names one
COLAB_PYTHON ?=
# make test: pytest-xdist's workers, a test file each at a time, where it is installed; conftest.py makes `auto` one
# worker per core in replay and a single worker live (a GPU's timings are never shared with another test)
XDIST = $$($(PYTHON) -c 'import xdist' 2>/dev/null && printf '%s' '-n auto --dist loadfile')

.PHONY: help setup course test record info labs dist colab-test compile-matrix preflight site browser hub-test hub-users-test clean
help:                       ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):[^#]*## /  make \1\t/' | expand -t 22
setup: $(SETUP)             ## only set up .venv: the course's packages, its Jupyter kernel, nvcc if none is found
course: $(SETUP)            ## run every notebook headless and print the summary
	$(PYTHON) -m streamalloc run
test: $(SETUP)              ## unit tests, CUDA builds, every notebook through nbval (in replay, one worker a core)
	$(PYTHON) -m pytest $(XDIST)
record: $(SETUP)            ## on a GPU: run notebooks and solutions live, write recordings/
	$(PYTHON) -m streamalloc record
info: $(SETUP)              ## what this machine has: GPU, driver, nvcc, CuPy, the mode the course will run in
	$(PYTHON) -m streamalloc info
labs: $(SETUP)              ## regenerate the generated files: links (README map, set-up lines), labs/
	$(PYTHON) tools/make_links.py
	$(PYTHON) tools/make_labs.py
dist: $(SETUP)              ## build/dist/stream-ordered-allocator.zip: what git tracks, in one archive (refuses labs edited in place: DIST_ARGS=--allow-edits)
	$(PYTHON) tools/make_dist.py $(DIST_ARGS)
colab-test: $(COLAB_VENV)/.installed  ## as on Colab (Python 3.12, its pins and IPython config): every notebook and lab from the archive in a fresh folder
	@$(COLAB_VENV)/bin/python -c 'import sys; v = "%d.%d.%d" % sys.version_info[:3]; v.startswith("3.12.") or \
	  print(f"WARNING: the Colab tier runs on Python {v}, not on Colab\x27s 3.12 (see tests/colab/colab_python.sh)")'
	JUPYTER_PATH=$(abspath $(COLAB_VENV))/share/jupyter PYDEVD_DISABLE_FILE_VALIDATION=1 STREAMALLOC_COLAB_TIER=1 \
	  $(COLAB_VENV)/bin/python -m pytest -rs tests/test_widgets.py tests/test_colab_setup.py tests/test_gpu.py tests/colab
compile-matrix: $(SETUP)    ## every .cu for sm_75 and the recorded GPU, with CUDA 13 and CUDA 12.4 on 12.0 headers
	$(PYTHON) tools/compile_matrix.py --jobs 2

preflight: $(SETUP)         ## instructors, on a room's machine: run it all live and in replay, build/preflight/report.html
	$(PYTHON) -m streamalloc preflight
site: $(SETUP)              ## the read-ahead copy: every notebook run in replay, as web pages in build/site/
	$(PYTHON) -m streamalloc.site --edits-only
	STREAMALLOC_MODE=replay $(PYTHON) -m streamalloc run --no-progress
	$(PYTHON) -m streamalloc.site
browser: $(SETUP) $(COLAB_VENV)/.installed  ## JupyterLab, and classic Notebook with Colab's widgets, in headless Chromium (see .ci/run)
	STREAMALLOC_BROWSER=1 STREAMALLOC_MODE=replay $(PYTHON) -m pytest tests/browser
hub-test: $(SETUP) build/hub-tools/.installed  ## a real JupyterHub with workshop/'s config on 127.0.0.1: 3 learners run 00 and lab 1 (replay)
	STREAMALLOC_MODE=replay $(PYTHON) tools/hub_test.py
hub-users-test: $(SETUP)    ## as root: the README's hub set up step by step for system users, attacked as a learner would (replay)
	STREAMALLOC_MODE=replay $(PYTHON) tools/hub_users_test.py

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -r requirements.txt
	$(VENV)/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (course)"
	bash tools/ensure_nvcc.sh $(VENV)
	touch $@

# rebuilt only when the pins or the choice of Python change; pip's cache (~/.cache/pip) keeps the downloads
$(COLAB_VENV)/.installed: constraints/colab.txt tests/colab/colab_python.sh
	rm -rf $(COLAB_VENV)
	py=$$(COLAB_PYTHON='$(COLAB_PYTHON)' bash tests/colab/colab_python.sh) && "$$py" -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/python -m pip install -q -c constraints/colab.txt -r constraints/colab.txt
	$(COLAB_VENV)/bin/python -m pip check
	$(COLAB_VENV)/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (Colab's packages)"
	bash tools/ensure_nvcc.sh $(COLAB_VENV)
	touch $@

# the hub's packages go into the course's environment (each learner's server runs with its Python, as in the image);
# configurable-http-proxy from npm, into build/hub-tools
build/hub-tools/.installed: workshop/requirements-hub.txt
	$(PYTHON) -m pip install -q -r workshop/requirements-hub.txt
	npm install --silent --no-audit --no-fund --prefix build/hub-tools configurable-http-proxy@4
	touch $@

clean:                      ## remove build/ (builds, executed notebooks, the archive, build/venv-colab)
	rm -rf build
