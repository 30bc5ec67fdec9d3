# The course's two commands (README.md):  make course  runs every notebook;  make test  runs the tests.
# Both set up a virtual environment in .venv first. On a machine whose Python already has the packages,
# skip that with PYTHON=python3 (for example: make test PYTHON=python3).
VENV   ?= .venv
PYTHON ?= $(VENV)/bin/python
SETUP  := $(if $(filter $(VENV)/bin/python,$(PYTHON)),$(VENV)/.installed)

.PHONY: setup course test record info labs preflight site browser clean
setup: $(SETUP)             ## only set up .venv: the course's packages, its Jupyter kernel, nvcc if none is found
course: $(SETUP)            ## run every notebook headless and print the summary
	$(PYTHON) -m streamalloc run
test: $(SETUP)              ## unit tests, CUDA builds, every notebook through nbval
	$(PYTHON) -m pytest
record: $(SETUP)            ## on a GPU: run notebooks and solutions live, write recordings/
	$(PYTHON) -m streamalloc record
info: $(SETUP)
	$(PYTHON) -m streamalloc info
labs: $(SETUP)              ## regenerate the generated files: links (README map, set-up lines), labs/
	$(PYTHON) tools/make_links.py
	$(PYTHON) tools/make_labs.py

preflight: $(SETUP)         ## instructors, on a room's machine: run it all live and in replay, build/preflight/report.html
	$(PYTHON) -m streamalloc preflight
site: $(SETUP)              ## the read-ahead copy: every notebook run in replay, as web pages in build/site/
	env -u MPLBACKEND STREAMALLOC_MODE=replay $(PYTHON) -m streamalloc run --no-progress
	$(PYTHON) -m streamalloc.site
browser: $(SETUP)           ## JupyterLab in headless Chromium (needs chromium and playwright: see .ci/run)
	STREAMALLOC_BROWSER=1 STREAMALLOC_MODE=replay $(PYTHON) -m pytest tests/browser

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -r requirements.txt
	$(VENV)/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (course)"
	bash tools/ensure_nvcc.sh $(VENV)
	touch $@

clean:
	rm -rf build
