"""Run a CLI with its output folder on a small private file system (a tmpfs in a user+mount namespace).

Used as `unshare -rm python fs_driver.py MODE MOUNT KEEP -- CMD...` by fault_helpers.run_on_small_fs:
- MODE `ro`: the tmpfs is mounted read-only, so writing under MOUNT fails with EROFS.
- MODE `fill-after:PATH`: the tmpfs is writable; once MOUNT/PATH exists (e.g. the first finished
  checkpoint's integrity record), the disk is filled up to 128 KiB, so the next larger write meets
  ENOSPC (a full disk), as on a real cluster volume.
- MODE `fill-full-after:PATH`: the same, but the disk is filled completely (the next write of any size fails).
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
    if mode.startswith(("fill-after:", "fill-full-after:")):
        marker = Path(mount) / mode.split(":", 1)[1]
        while proc.poll() is None and not marker.exists():
            time.sleep(0.02)
        if proc.poll() is None:
            free = shutil.disk_usage(mount).free
            with open(Path(mount) / "filler.bin", "wb") as f:
                f.truncate(0)
                leave = 0 if mode.startswith("fill-full-after:") else LEAVE_FREE
                os.posix_fallocate(f.fileno(), 0, max(free - leave, 1))
                if not leave:  # tmpfs may keep a few pages back from fallocate: take them too
                    f.seek(0, os.SEEK_END)
                    try:
                        while os.write(f.fileno(), b"\0" * 4096):
                            pass
                    except OSError:
                        pass
    rc = proc.wait()
    if mode != "ro":
        shutil.copytree(mount, keep, symlinks=True, ignore=shutil.ignore_patterns("filler.bin"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
