"""The Colab tier runs only when asked (`make colab-test` sets STREAMALLOC_COLAB_TIER=1): it needs Colab's package
set (build/venv-colab) and runs every notebook again. `make test` leaves it out."""
import os

collect_ignore_glob = [] if os.environ.get("STREAMALLOC_COLAB_TIER") == "1" else ["test_*.py"]
