"""How every benchmark ends: its summary record appended to `--out` (if given) and printed as the last
JSON line, so scripts and CI can read the last line of stdout."""

from __future__ import annotations

import json
from typing import Any


def emit_record(record: dict[str, Any], out: str | None) -> dict[str, Any]:
    if out:
        from muse_common.files import append_jsonl

        append_jsonl(out, record)
    print(json.dumps(record), flush=True)
    return record
