"""google.colab.drive: mount(mountpoint) makes the learner's Drive appear at mountpoint (here: a link to
$COLAB_STANDIN_DRIVE, which holds MyDrive/). Colab asks for permission in a pop-up first; the stand-in does not."""
import os
from pathlib import Path


def mount(mountpoint, force_remount=False, timeout_ms=120000, readonly=False):
    from . import _local

    target = Path(os.environ.get("COLAB_STANDIN_DRIVE", ""))
    if not (target / "MyDrive").is_dir():
        raise ValueError("mount failed")  # what Colab says when the mount does not come up
    where = _local(mountpoint)
    if where.is_symlink() or where.exists():
        if not force_remount:
            print(f"Drive already mounted at {mountpoint}; to attempt to forcibly remount, call "
                  f'drive.mount("{mountpoint}", force_remount=True).')
            return
        where.unlink()
    where.parent.mkdir(parents=True, exist_ok=True)
    where.symlink_to(target, target_is_directory=True)
    print(f"Mounted at {mountpoint}")


def flush_and_unmount(timeout_ms=24 * 60 * 60 * 1000):
    from . import _local

    where = _local("/content/drive")
    if where.is_symlink():
        where.unlink()
