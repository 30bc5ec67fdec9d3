#!/usr/bin/env bash
# The Colab tier's Python: Colab runs 3.12 (COURSE.md), and so should `make colab-test`. Prints the interpreter's path
# on stdout; what it tried, and any fallback, on stderr. In order:
#   1. $COLAB_PYTHON, when set (whatever version it is: a version other than 3.12 is said below);
#   2. python3.12 on PATH, when it runs (a pyenv shim for a version not selected does not);
#   3. pyenv's 3.12 (this kind of machine ships pyenv with 3.12 beside the default 3.11; Debian 12 has no python3.12);
#   4. a python-build-standalone 3.12 that uv (from PyPI, into build/uv) installs into build/python (its download
#      host is outside the package registries: it works where that host is reachable);
#   5. else python3, and a warning that says which version the tier then runs on.
set -uo pipefail
cd "$(dirname "$0")/../.."
want=3.12
runs() { [ -n "$1" ] && "$1" -c "import sys, venv, ensurepip; assert '%d.%d' % sys.version_info[:2] == '$want'" \
           >/dev/null 2>&1; }
version() { "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null; }
say() { echo "colab python: $*" >&2; }
if [ -n "${COLAB_PYTHON:-}" ]; then
  if ! version "$COLAB_PYTHON" >/dev/null; then say "COLAB_PYTHON=$COLAB_PYTHON does not run"; exit 1; fi
  runs "$COLAB_PYTHON" || say "WARNING: COLAB_PYTHON=$COLAB_PYTHON is Python $(version "$COLAB_PYTHON"), not Colab's $want"
  echo "$COLAB_PYTHON"; exit 0
fi
if runs "$(command -v python$want)"; then command -v python$want; exit 0; fi
for p in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/$want.*/bin/python$want 2>/dev/null | sort -V -r); do
  if runs "$p"; then echo "$p"; exit 0; fi
done
for p in build/python/cpython-$want.*/bin/python$want; do
  if runs "$p"; then echo "$PWD/$p"; exit 0; fi
done
say "no Python $want found (PATH, pyenv, build/python): installing one with uv into build/python"
if { [ -x build/uv/bin/uv ] || { python3 -m venv build/uv && build/uv/bin/python -m pip install -q uv; } >&2; } &&
   UV_PYTHON_INSTALL_DIR="$PWD/build/python" build/uv/bin/uv python install --no-bin $want >&2; then
  for p in build/python/cpython-$want.*/bin/python$want; do
    if runs "$p"; then echo "$PWD/$p"; exit 0; fi
  done
fi
say "WARNING: no Python $want could be found or installed (see above): the Colab tier runs on Python" \
    "$(version python3) instead, not on Colab's $want"
command -v python3
