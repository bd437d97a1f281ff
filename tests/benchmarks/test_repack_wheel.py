"""benchmarks/repack_wheel.py: what it drops is gone, what it keeps is byte for byte the same, and the RECORD
lists exactly the kept files with their true hashes (pip installs from it)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchmarks.repack_wheel import main

FILES = {"pkg/__init__.py": b"X = 1\n", "pkg/assets/big.xml": b"<big/>" * 100, "pkg/suite/a.xml": b"<a/>",
         "pkg/pic.png": b"\x89PNG", "pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n",
         "pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}


def wheel(tmp_path: Path) -> Path:
    path = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in FILES.items():
            z.writestr(name, data)
        z.writestr("pkg-1.0.dist-info/RECORD", "stale,,\n")
    return path


def test_drops_what_it_names_and_records_what_it_keeps(tmp_path: Path) -> None:
    path = wheel(tmp_path)
    path.chmod(0o644)
    main([str(path), "--drop", "pkg/assets/", "--drop", ".png"])
    assert path.stat().st_mode & 0o777 == 0o644
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        assert names == {n for n in FILES if n not in ("pkg/assets/big.xml", "pkg/pic.png")} | {
            "pkg-1.0.dist-info/RECORD"}
        for n in names - {"pkg-1.0.dist-info/RECORD"}:
            assert z.read(n) == FILES[n]
        record = dict(line.split(",", 1) for line in z.read("pkg-1.0.dist-info/RECORD").decode().splitlines())
    assert set(record) == names
    for n, (algo_hash, size) in ((n, record[n].rsplit(",", 1)) for n in names - {"pkg-1.0.dist-info/RECORD"}):
        want = base64.urlsafe_b64encode(hashlib.sha256(FILES[n]).digest()).rstrip(b"=").decode()
        assert algo_hash == f"sha256={want}" and int(size) == len(FILES[n])
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target",
                    str(target), str(path)], check=True)
    assert (target / "pkg" / "suite" / "a.xml").exists() and not (target / "pkg" / "assets").exists()
    assert not list(tmp_path.glob("*.part"))  # written atomically, nothing left beside it


def test_a_file_that_is_not_a_wheel_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.whl"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("a.txt", "no RECORD")
    with pytest.raises(SystemExit, match="not a wheel"):
        main([str(bad)])
    (tmp_path / "y.whl").write_text("plain text")
    with pytest.raises(SystemExit, match="not a zip archive"):
        main([str(tmp_path / "y.whl")])
    with pytest.raises(SystemExit, match="no wheel at"):
        main([str(tmp_path / "missing.whl")])
