"""Fixtures shared by the LLM-side tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def sw_env() -> Iterator[Any]:
    """A real ScienceWorld env (one JVM per test module), closed after the module's tests."""
    pytest.importorskip("scienceworld")
    from llm_side.envs.scienceworld import make_env

    env = make_env(step_timeout_s=60)
    yield env
    env.close()
