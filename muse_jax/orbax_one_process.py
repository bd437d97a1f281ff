"""Multi-host runs: each host's orbax acts as a single-process checkpointer of its own folder."""

from __future__ import annotations


def orbax_sees_one_process() -> None:
    """Multi-host: make orbax treat this process as process 0 of one, for the rest of the process.

    Why: each host keeps its own checkpoint (its own replay; no shared file system needed), which orbax's
    options cannot express: with `MultiprocessingOptions(primary_host=me, active_processes={me})` it still
    writes numpy leaves on process 0 only (so process 1's folder came out empty) and refuses arrays that
    live on one host. Orbax asks `multihost.process_index()` who it is; answering 0 everywhere makes each
    host's checkpointer a single-process one. This patches a private orbax function (checked against
    orbax-checkpoint 0.12.x, pinned by tests/muse_jax/test_multihost.py); muse-wm uses orbax for nothing
    else, and the train step's collectives do not go through orbax.
    """
    from orbax.checkpoint._src.multihost import multihost

    multihost.process_index = lambda: 0
