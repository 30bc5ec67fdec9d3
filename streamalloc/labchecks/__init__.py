"""The labs' checking cells, one module per lab: `sa.labchecks.lab1(lesson)` runs labchecks/lab1.py's check.

Each check is a list of named findings (functions that each add what they found to a `checks.Report`): first
what the program's results show (output values, the pool's statistics, compute-sanitizer's report, memory
still in use at the end), then what the reading of the learner's code explains. A lab's program declares the
JSON lines it prints in a comment block at its top, in the solution notebook; the check reads those fields.

A module `labN.py` that defines a function `labN(lesson)` is found here by its name: adding a lab is adding a
file.
"""
import importlib as _importlib
import pkgutil as _pkgutil
import re as _re

for _module in _pkgutil.iter_modules(__path__):
    if _re.fullmatch(r"lab\d+", _module.name):
        globals()[_module.name] = getattr(_importlib.import_module(f"{__name__}.{_module.name}"), _module.name)
