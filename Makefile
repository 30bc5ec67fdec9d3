# The course's two commands (README.md):  make course  runs every notebook;  make test  runs the tests.
# Both set up a virtual environment in .venv first. On a machine whose Python already has the packages,
# skip that with PYTHON=python3 (for example: make test PYTHON=python3).
VENV   ?= .venv
PYTHON ?= $(VENV)/bin/python
SETUP  := $(if $(filter $(VENV)/bin/python,$(PYTHON)),$(VENV)/.installed)

.PHONY: course test record info labs clean
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

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -r requirements.txt
	$(VENV)/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (course)"
	bash tools/ensure_nvcc.sh $(VENV)
	touch $@

clean:
	rm -rf build
