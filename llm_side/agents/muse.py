"""MUSE-LLM (paper 000, §4.1.3): competence-aware action selection on top of Reflexion.

Each step the World Model/Actor (one LLM, prompted with the ReAct transcript) samples `n_rollouts`
continuations at temperature 0.5 in ONE batched call; each continuation is a look-ahead trajectory of
actions and predicted observations. The Self-Awareness Model M_sa scores every rollout (with the
episode plan), Self-Regulation takes the first action of the best one, and that score is the step's
competence. Reflections work as in Reflexion.

Rollout horizon (MUSE §4.1.3). The paper states no horizon H: "the LLM was allowed to generate
trajectories up to the maximum length permitted by its context window". `rollout_tokens` is the setting:
  - "context": up to the context window, i.e. window - prompt tokens (the backend's `context_window`,
    else the `context_window` option, else DEFAULT_CONTEXT_WINDOW); the paper's rule;
  - "auto" (default): "context", except where the model decodes on a CPU (an in-process CPU backend, or a
    local `muse-llm serve`, whose record says it runs on the CPU), where CPU_ROLLOUT_TOKENS is used;
  - an integer: that many tokens.
A rollout ends only where the LLM stops (end of text, the token budget, or the start of another few-shot
game, "Here is the task"); blank lines inside it are skipped, not an end. `score_pairs` (default: all)
bounds how many of a rollout's action-observation pairs M_sa reads; M_sa is trained on 4-pair chunks
(Algorithm 2), so `score_pairs=4` scores exactly what it was trained on (the paper does not say).

Self-regulation control. `select="msa"` (the default, the paper's rule) takes the first action of the rollout
M_sa scores highest. `select="vote"` takes the first action most rollouts share, ties going to the earliest
rollout, with M_sa still scoring every rollout (the recorded competence is the chosen one's score). This is the
simple alternative the mechanism has to beat: the same 5 samples, a choice that needs no M_sa. It is not in the
paper, and it changes only the steps where the valid rollouts disagree on their first action.

Deployment adaptation (Algorithm 3): with `adapt_episodes=k`, after the task's first k episodes the
MLP of M_sa is refitted on a replay of pre-deployment chunks plus this task's new chunks; the next
task starts again from the pre-deployment weights. The new chunks live in `memory()`, so a resumed
run refits to the same weights.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from llm_side.agents import prompting, reflexion
from llm_side.agents import self_awareness as sa
from llm_side.agents.reflexion import ReflexionAgent
from llm_side.harness.contracts import LLM, Decision, EpisodeOutcome, Observation, TextEnv
from muse_common.settings import Allowed, build_options, integer_at_least, setting

REPLAY_FILE = "replay.jsonl"
CPU_ROLLOUT_TOKENS = 64
"""The CPU default horizon, sized to keep a MUSE step within 3x a ReAct step on the same model and machine.
One M_sa chunk (four action-observation pairs) of the ALFWorld ReAct examples is 128 tokens on
average (179 at the 90th percentile, Qwen2.5 tokenizer, all 289 pairs of react_alfworld_3prompts.json), so 64
tokens hold about two pairs: M_sa scores half a chunk (`rollout_tokens=128` scores about one, at ~3.5x).
Measured with benchmarks/llm_sampling.py --agent-steps 2 (qwen0.5b, 2 CPU cores shared with other jobs, one
torch thread; docs/llm/alfworld_pipeline.md has the table): MUSE / ReAct seconds per step 4.54 at 256 tokens,
3.54 at 128, 3.31-3.43 at 96, 1.67-2.06 at 64 (ReAct 15-58 s a step as the load went from 1.4 to 11). A batch-5
decoding step costs ~0.4 s there, so each token of horizon costs the step that. Rolling out to the 32K
window instead would take tens of minutes a step."""
DEFAULT_CONTEXT_WINDOW = 8192
"""Window assumed for backends that do not report theirs (an OpenAI-compatible server other than a local
`muse-llm serve`, whose record gives its n_ctx): set the `context_window` option to the server's n_ctx."""
ROLLOUT_STOP = "Here is the task"
Selection = Literal["msa", "vote"]
"""How self-regulation picks among rollouts: the paper's M_sa argmax, or the majority first action (a control)."""
SELECTIONS: tuple[str, ...] = get_args(Selection)


def choose(scores: Any, first_actions: list[str], select: Selection = "msa") -> int:
    """Index of the rollout self-regulation follows: M_sa's highest score ("msa", the paper), or the first
    rollout whose first action most rollouts share ("vote", the control; ties go to the earliest)."""
    if select == "vote":
        counts = Counter(first_actions)
        return max(range(len(first_actions)), key=lambda i: (counts[first_actions[i]], -i))
    return int(np.argmax(scores))


def rollout_budget(setting: int | str, prompt_tokens: int, context_window: int | None, on_cpu: bool) -> int:
    """Tokens one rollout may generate (see the module docstring): 'context' -> what is left of the
    window after the prompt (at least 1); 'auto' -> CPU_ROLLOUT_TOKENS on a CPU backend, else 'context';
    an integer -> itself."""
    if isinstance(setting, int) and not isinstance(setting, bool):
        if setting < 1:
            raise ValueError(f"rollout_tokens must be >= 1, 'auto' or 'context', got {setting}.")
        return setting
    if setting == "auto" and on_cpu:
        return CPU_ROLLOUT_TOKENS
    if setting in ("auto", "context"):
        return max(1, int(context_window or DEFAULT_CONTEXT_WINDOW) - int(prompt_tokens))
    raise ValueError(f"rollout_tokens must be an integer >= 1, 'auto' or 'context', got {setting!r}.")


class MuseAgent(ReflexionAgent):
    """Reflexion + World Model rollouts + M_sa scoring + best-first-action self-regulation."""

    name = "muse"

    def __init__(self, llm: LLM, msa: sa.SelfAwarenessModel, *, n_rollouts: int = 5, rollout_temperature: float = 0.5,
                 rollout_tokens: int | str = "auto", score_pairs: int | None = None,
                 context_window: int | None = None, adapt_episodes: int = 0, replay: list[sa.SAExample] | None = None,
                 replay_ratio: int = 4, adapt_epochs: int = 10, select: Selection = "msa", **kw: Any):
        super().__init__(llm, **kw)
        if n_rollouts < 1:
            raise ValueError(f"n_rollouts must be >= 1, got {n_rollouts}.")
        if select not in SELECTIONS:
            raise ValueError(f"select must be one of {', '.join(SELECTIONS)}, got {select!r}.")
        self.select = select
        self.msa = msa
        self.n_rollouts = n_rollouts
        self.rollout_temperature = rollout_temperature
        rollout_budget(rollout_tokens, 0, context_window, False)  # validates the setting now
        if score_pairs is not None and score_pairs < 1:
            raise ValueError(f"score_pairs must be >= 1 (or absent for all pairs), got {score_pairs}.")
        self.rollout_tokens = rollout_tokens
        self.score_pairs = score_pairs
        self.context_window = context_window
        self.adapt_episodes = adapt_episodes
        self.replay = list(replay or [])
        self.replay_ratio = replay_ratio
        self.adapt_epochs = adapt_epochs
        self._base_state = copy.deepcopy(msa.mlp.state_dict())
        self._new_examples: list[dict[str, Any]] = []
        self._adapted = False
        self._plan = ""
        self.msa_source: str | None = None  # folder the M_sa weights came from (None = untrained)

    def begin_episode(self, obs: Observation, *, task_id: str, episode: int, env: TextEnv) -> None:
        super().begin_episode(obs, task_id=task_id, episode=episode, env=env)
        self._plan = ""

    # -- acting ------------------------------------------------------------------------------------
    def act(self, observation: str, admissible_actions: list[str] | None) -> Decision:
        self._record_observation(observation)
        prompt = self.build_prompt()
        seed = None if self.seed is None else self.seed * 100_003 + self._episode * 1_000 + self._t
        self._t += 1
        budget = self.horizon(prompt)
        texts = self.llm.complete(prompt, n=self.n_rollouts, temperature=self.rollout_temperature,
                                  max_tokens=budget, stop=[ROLLOUT_STOP], seed=seed)
        candidates = []
        for text in texts:
            text = (text or "").lstrip("\n ")  # a rollout may open with a newline
            first = prompting.parse_action(text.split("\n", 1)[0])
            if first.invalid:
                continue
            pairs = prompting.parse_rollout(text, max_pairs=self.score_pairs or 10**6) or [(first.action, "")]
            pairs[0] = (first.action, pairs[0][1])
            candidates.append((first.action, pairs))
        if not candidates:
            return self._decide(texts[0] if texts else "", info={"rollouts": len(texts), "valid_rollouts": 0})
        first_think = candidates[0][0]
        plan = self._plan or (first_think[len("think:"):].strip() if first_think.startswith("think:") else "")
        scores = self.msa.predict([self._task] * len(candidates), [sa.chunk_text(plan, p) for _, p in candidates])
        best = choose(scores, [a for a, _ in candidates], self.select)
        action = candidates[best][0]
        if not self._plan and action.startswith(prompting.THINK_PREFIX):
            self._plan = action[len(prompting.THINK_PREFIX):].strip()
        info = {"rollout_scores": [round(float(s), 4) for s in scores], "valid_rollouts": len(candidates),
                "rollouts": len(texts), "rollout_tokens": budget,
                "rollout_pairs": [len(p) for _, p in candidates],
                "rollout_actions": [a for a, _ in candidates],  # what self-regulation chose among, beside M_sa's scores
                "chosen": best}
        return self._decide(action, competence=float(scores[best]), info=info)

    def horizon(self, prompt: str) -> int:
        """This step's rollout budget in tokens (`rollout_budget` with the backend's window and device)."""
        window = self.context_window or getattr(self.llm, "context_window", None)
        count = getattr(self.llm, "count_tokens", None)
        tokens = count(prompt) if callable(count) else prompting.approx_tokens(prompt)
        return rollout_budget(self.rollout_tokens, tokens, window, bool(getattr(self.llm, "on_cpu", False)))

    # -- episode end: reflection, chunk scores, adaptation ------------------------------------------
    def end_episode(self, outcome: EpisodeOutcome) -> None:
        super().end_episode(outcome)
        record = {"actions": [a for a, _ in outcome.trajectory], "observations": [o for _, o in outcome.trajectory],
                  "task_text": self._task, "success": outcome.success, "task": outcome.task_id}
        examples = sa.examples_from_record(record)
        self._chunk_scores = [round(float(s), 4) for s in self.msa.predict([e.task for e in examples],
                                                                           [e.chunk for e in examples])]
        if outcome.episode < self.adapt_episodes:
            self._new_examples.extend(_to_json(e) for e in examples)
            if outcome.episode == self.adapt_episodes - 1:
                self._adapt()

    def _adapt(self) -> None:
        """Refit the MLP from the pre-deployment weights on replay + this task's new chunks."""
        self.msa.mlp.load_state_dict(self._base_state)
        new = [sa.SAExample(**e) for e in self._new_examples]
        if not new:
            return
        rng = random.Random(len(new))
        old = rng.sample(self.replay, min(len(self.replay), self.replay_ratio * len(new)))
        self.msa.fit(old + new, epochs=self.adapt_epochs, seed=0)
        self._adapted = True

    def episode_extras(self) -> dict[str, Any]:
        extras = super().episode_extras()
        extras["plan"] = self._plan
        extras["chunk_competence"] = getattr(self, "_chunk_scores", [])
        extras["msa_adapted"] = self._adapted
        extras["msa_source"] = self.msa_source
        extras["actor_model"] = getattr(self.llm, "name", None)
        extras["reflection_model"] = getattr(self.reflection_llm, "name", None)
        return extras

    def memory(self) -> dict[str, Any]:
        mem = super().memory()
        mem["sa_new"] = list(self._new_examples)
        mem["sa_adapted"] = self._adapted
        return mem

    def load_memory(self, memory: dict[str, Any]) -> None:
        """Fresh task ({}) -> pre-deployment M_sa; resumed task -> refit on the stored new chunks."""
        memory = memory or {}
        super().load_memory({"reflections": memory.get("reflections", [])})
        self.msa.mlp.load_state_dict(self._base_state)
        self._new_examples = list(memory.get("sa_new", []))
        self._adapted = False
        if memory.get("sa_adapted"):
            self._adapt()


def _to_json(e: sa.SAExample) -> dict[str, Any]:
    return {"task": e.task, "plan": e.plan, "chunk": e.chunk, "label": e.label}


def load_replay(msa_dir: str | Path) -> list[sa.SAExample]:
    """Pre-deployment chunks saved next to the M_sa weights (empty if none)."""
    from muse_common.records import SA_EXAMPLE, read_records

    rows = read_records(Path(msa_dir) / REPLAY_FILE, SA_EXAMPLE)  # a row failing the schema: one line (RecordError)
    return [sa.SAExample(**{k: r[k] for k in ("task", "plan", "chunk", "label")}) for r in rows]


@dataclasses.dataclass(frozen=True)
class Options(reflexion.Options):
    """MUSE-LLM's options (paper 000 §4.1.3): Reflexion's, plus M_sa, the rollouts and adaptation."""

    msa: str | None = None
    """Folder of a trained M_sa (`muse-llm alfworld-pipeline --stage train-sa`); none = an untrained MLP,
    whose scores carry no information (a warning says so)."""
    embedder: str | None = None
    """Sentence embedder of M_sa (name or folder); none = MUSE_LLM_EMBEDDER, else the packaged MiniLM."""
    n_rollouts: int = setting(5, integer_at_least(1))
    """Look-ahead rollouts sampled per step in one batched call."""
    rollout_tokens: Literal["auto", "context"] | int = setting(
        "auto", Allowed(lambda v, _: not isinstance(v, int) or v >= 1, "auto, context or an integer >= 1"))
    """Rollout horizon: `context` (up to the context window, the paper's rule), `auto` (context, except a
    short budget where the model decodes on a CPU, in process or behind a local `muse-llm serve`) or a token
    count (see the module docstring)."""
    score_pairs: int | None = setting(None, integer_at_least(1))
    """Action-observation pairs of a rollout M_sa reads; none = all (4 = the chunk size M_sa is trained on)."""
    context_window: int | None = setting(None, integer_at_least(1))
    """Context window for `rollout_tokens=context` when the backend does not report one."""
    select: Selection = "msa"
    """Self-regulation's choice among rollouts: `msa` (the highest M_sa score, the paper) or `vote` (the first action
    most rollouts share: the control that needs no M_sa; see the module docstring)."""
    adapt_episodes: int = setting(0, integer_at_least(0))
    """k of Algorithm 3: refit M_sa after a task's first k episodes (0 = no deployment adaptation)."""


def make_agent(env_name: str, llm: LLM, opts: Options | Mapping[str, Any] | None = None) -> MuseAgent:
    from llm_side.backends import load_embedder

    opts = build_options(Options, opts, "muse")
    embedder = load_embedder(opts.embedder)
    msa_dir = opts.msa
    if msa_dir:
        msa = sa.SelfAwarenessModel.load(msa_dir, embedder)
        replay = load_replay(msa_dir)
    else:
        msa, replay = sa.SelfAwarenessModel(embedder), []
    models = ("msa", "embedder", "reflection_model", "actor_model")  # loaded here, not MuseAgent's keywords
    kw = {k: v for k, v in dataclasses.asdict(opts).items() if k not in models}
    llm, kw["reflection_llm"] = reflexion.load_models(llm, opts)  # Algorithm 3's fine-tuned actor and M_rx
    agent = MuseAgent(llm, msa, replay=replay, **kw)
    agent.msa_source = str(msa_dir) if msa_dir else None
    if not msa_dir:
        import warnings

        warnings.warn(
            "MUSE agent without a trained M_sa (--agent-opt msa=DIR): competence scores are from an "
            "untrained MLP; train one with `muse-llm alfworld-pipeline --stage train-sa`.",
            stacklevel=2,
        )
    return agent
