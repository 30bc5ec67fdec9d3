"""The browser tests run only when asked (`make browser`, .ci/run): they need Chromium and Playwright, and a
few minutes. `make test` leaves them out."""
import os

collect_ignore_glob = [] if os.environ.get("STREAMALLOC_BROWSER") == "1" else ["test_*.py"]
