"""The agent kinds `muse-wm` pre-trains, adapts and scores, named once.

"muse" has the self-awareness (competence) head and loss and acts with self-regulation; "dreamer" is
the same model without them (the paper's Dreamer-v3 baseline). The CLI's `--agent` choices, the
policy modes, adaptation and evaluation all take their list from here.
"""

from __future__ import annotations

from typing import Literal, get_args

AgentKind = Literal["muse", "dreamer"]
AGENT_KINDS: tuple[str, ...] = get_args(AgentKind)
