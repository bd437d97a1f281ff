"""Repack a wheel without some of its files, with a RECORD that matches what is left.

Why: a GPU lease takes at most 64 MiB of carried files, and dm_control's wheel alone is 56 MB, nearly all of
it assets of domains a DMC learning curve never loads (locomotion's soccer and walkers, the dog, test
models, Blender exporters, pictures). `benchmarks/gpu_prepare.sh --dmc` drops them; `dm_control.suite`'s
other domains import and load as before (checked by the script after repacking).

    python benchmarks/repack_wheel.py WHEEL --drop dm_control/locomotion/soccer/ --drop .png

`--drop` takes a path prefix inside the wheel (ending in "/" for a folder) or a file suffix (starting with ".").
The wheel is rewritten in place (atomically); the dist-info's RECORD is regenerated.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import sys
import tempfile
import zipfile
from pathlib import Path


def dropped(name: str, drops: list[str]) -> bool:
    return any(name.endswith(d) if d.startswith(".") else name.startswith(d) for d in drops)


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def repack(wheel: Path, drops: list[str]) -> tuple[int, int]:
    """Rewrite `wheel` without the files `drops` names; (files kept, files dropped)."""
    with zipfile.ZipFile(wheel) as zin:
        infos = zin.infolist()
        records = [i for i in infos if i.filename.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise SystemExit(f"repack_wheel: {wheel} has {len(records)} RECORD files, not one: not a wheel")
        record = records[0].filename
        kept = [i for i in infos if i.filename != record and not dropped(i.filename, drops)]
        fd, tmp = tempfile.mkstemp(dir=wheel.parent, suffix=".whl.part")
        os.close(fd)
        try:
            lines = []
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
                for info in kept:
                    data = zin.read(info)
                    zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
                    if not info.is_dir():
                        lines.append(record_line(info.filename, data))
                lines.append(f"{record},,")
                zout.writestr(record, "\n".join(lines) + "\n")
            os.chmod(tmp, wheel.stat().st_mode & 0o777)  # mkstemp's 0600 would hide it from other users
            os.replace(tmp, wheel)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return len(kept), len(infos) - len(kept) - 1


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("wheel", type=Path)
    p.add_argument("--drop", action="append", default=[], help="path prefix (folder/) or file suffix (.png)")
    args = p.parse_args(argv)
    if not args.wheel.is_file():
        sys.exit(f"repack_wheel: no wheel at {args.wheel}")
    before = args.wheel.stat().st_size
    try:
        kept, gone = repack(args.wheel, args.drop)
    except zipfile.BadZipFile:
        sys.exit(f"repack_wheel: {args.wheel} is not a zip archive: not a wheel")
    print(f"{args.wheel.name}: kept {kept} files, dropped {gone}; {before / 2**20:.1f} MB -> "
          f"{args.wheel.stat().st_size / 2**20:.1f} MB")


if __name__ == "__main__":
    main()
