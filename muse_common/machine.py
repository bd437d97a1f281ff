"""Where a result was made: the host processor, named the same way in speed records and episode records.

A CPU figure holds for its processor, and the 2-core machines this project runs on have been of more than one
kind, so records carry `cpu_model` (benchmarks/report.py's speed records, `muse-llm run`'s episode records).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path


def cpu_model() -> str:
    """The host processor: its model name, family and model numbers and which of the AMX, AVX-512 and AVX2
    extensions it has (`/proc/cpuinfo`, e.g. "Intel(R) Xeon(R) Processor (family 6 model 167; amx, avx512,
    avx2)"; else `platform.processor()`, else "unknown"). Why: the 2-core machines this project is measured on
    have been of more than one kind, and a CPU figure holds for its processor; under a hypervisor the name
    alone can be generic, so the numbers and extensions go with it."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if not key.strip():
                break  # the first processor's block is enough
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name")
    if not name:
        import platform

        return platform.processor() or "unknown"
    flags = set(fields.get("flags", "").split())
    isa = [x for x, flag in (("amx", "amx_bf16"), ("avx512", "avx512f"), ("avx2", "avx2")) if flag in flags]
    family, model = fields.get("cpu family", "?"), fields.get("model", "?")
    return f"{name} (family {family} model {model}; {', '.join(isa) or 'sse'})"


def utc_now() -> str:
    """The current UTC time to the second, ISO 8601 (`2026-11-29T17:02:11Z`): when a record was made."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
