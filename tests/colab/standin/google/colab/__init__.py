"""A thin stand-in for Colab's google.colab, for the course's Colab tier (tests/colab/test_tier.py): what the course
and a learner call, with the real module's names and signatures (google.colab.drive, .output, .files), doing the
nearest thing a test machine can. `google` is a namespace package, as on Colab.

Where Colab has /content, the stand-in has the kernel's starting folder ($COLAB_STANDIN_CONTENT, which the tier
sets to a fresh folder): a path under /content is read under it. drive.mount links MOUNTPOINT to
$COLAB_STANDIN_DRIVE (a folder holding MyDrive/), as Colab's FUSE mount makes the learner's Drive appear there.
"""
import os
from pathlib import Path

from . import drive, files, output  # noqa: F401

__all__ = ["drive", "files", "output"]


def _content() -> Path:
    return Path(os.environ.get("COLAB_STANDIN_CONTENT") or "/content")


def _local(path: str) -> Path:
    """A Colab path on this machine: /content/x is $COLAB_STANDIN_CONTENT/x."""
    p = Path(path)
    if p.is_absolute() and p.parts[:2] == ("/", "content"):
        return _content().joinpath(*p.parts[2:])
    return p


loaded_as_extension = False


def load_ipython_extension(ipython):
    """What Colab's IPython configuration loads before the first cell (c.InteractiveShellApp.extensions): Colab's
    registers its magics and output hooks; the stand-in records that it was loaded."""
    global loaded_as_extension
    loaded_as_extension = True
