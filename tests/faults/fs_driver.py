"""Run a CLI with its output folder on a small private file system (a tmpfs in a user+mount namespace).

Used as `unshare -rm python fs_driver.py MODE MOUNT KEEP -- CMD...` by fault_helpers.run_on_small_fs:
- MODE `ro`: the tmpfs is mounted read-only, so writing under MOUNT fails with EROFS.
- MODE `fill-after:PATH`: the tmpfs is writable; once MOUNT/PATH exists (e.g. the first finished
  checkpoint's integrity record), the disk is filled up to 128 KiB, so the next larger write meets
  ENOSPC (a full disk), as on a real cluster volume.
After the command ends, MOUNT is copied to KEEP (the tmpfs vanishes with the namespace) and the
command's exit code is this script's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

LEAVE_FREE = 128 << 10


def main() -> int:
    mode, mount, keep = sys.argv[1:4]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    Path(mount).mkdir(parents=True, exist_ok=True)
    opts = "size=16m" + (",ro" if mode == "ro" else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", mount], check=True)
    proc = subprocess.Popen(cmd)
    if mode.startswith("fill-after:"):
        marker = Path(mount) / mode.split(":", 1)[1]
        while proc.poll() is None and not marker.exists():
            time.sleep(0.02)
        if proc.poll() is None:
            free = shutil.disk_usage(mount).free
            with open(Path(mount) / "filler.bin", "wb") as f:
                f.truncate(0)
                os.posix_fallocate(f.fileno(), 0, max(free - LEAVE_FREE, 0))
    rc = proc.wait()
    if mode != "ro":
        shutil.copytree(mount, keep, symlinks=True, ignore=shutil.ignore_patterns("filler.bin"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
