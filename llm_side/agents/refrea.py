"""RefRea (Mai et al., paper 003, Algorithm 1): a reasoning model acts with exploratory memory M_new and
validated memory M_target; a reference model (not executed) proposes an action from M_target only;
when the two proposals are semantically far apart (cosine < tau) the latest M_new entry is dropped
(once per step, Eq. 8) and the reasoning model resamples, up to `max_samples` samples in all. A
meta-cognition call f_meta adds an insight to M_new every `meta_interval` steps; M_new is promoted
into M_target when a step earns positive reward. M_target and M_new carry across a task's trials
through memory()/load_memory().

The memory rules are pure functions (`promote`, `drop_latest`, `meta_due`, `select_action`) so that
unit tests pin them without an LLM. Env-generic: prompts use the env's optional `react_examples` /
`instructions`, and the per-step reward comes from `env.last_result` (a `StepResult`) when the env
keeps one, or from `observe(result)` if a runner calls it.

Reference model. Paper 003's primary experiments use ONE model in both roles (Qwen2-72B as reasoning and
reference model; Table 3 crosses models and its diagonal holds the same-model pairs), so the paper setting
is `reference_model=same` (the default): the reference is the acting model prompted with M_target only.
The catch is real: when M_new is empty the two prompts are identical, and with greedy decoding both give the
same action (a held-out ScienceWorld run, 4-3: similarity 1.0 at every step, the refinement never
triggered). Our choice, not the paper's: the reasoning model's first sample of a step is drawn at
`temperature` (0.5, seeded), while the reference decodes greedily, so the check compares a sample with the
greedy proposal. Resamples use `resample_temperature`; meta-cognition decodes greedily.
The two-model setting of Table 3's off-diagonal cells is a named variant: `reference_model=paired` picks
qwen1.5b (the strongest packaged model, the paper's Qwen family) as reference, or qwen0.5b when the acting
model is qwen1.5b, whether it runs in-process or behind a server (`openai:URL:qwen1.5b`); any other model
spec names the reference directly. The run's summary.json reports the similarity distribution
(`similarity`), so a degenerate check (all 1.0) is visible.

Ablations (Table 5): `no_reference` (no reference model and no similarity check; meta-cognition still
feeds the reasoning model) and `no_metacognition` (the reasoning model sees no memory; insights are
still generated, promoted on reward and shown to the reference model; insights are made half as often
and at most 3 samples are drawn before the last one is forced, as the paper describes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from llm_side.agents import prompting
from llm_side.agents.base import LazyEmbedder, TranscriptAgent
from llm_side.harness.contracts import LLM, Decision, Embedder, EpisodeOutcome, Observation, StepResult, TextEnv
from muse_common.settings import Allowed, build_options, integer_at_least, number_at_least, setting

DEFAULT_TAU = 0.8
DEFAULT_REFERENCE = "qwen1.5b"
SAME_MODEL = "same"
PAIRED = "paired"
FIRST_TEMPERATURE = 0.5
"""Temperature of the reasoning model's first sample (a choice, see the module docstring)."""
DEFAULT_MAX_SAMPLES = 5
MAX_INSIGHT_CHARS = 300


def model_identity(spec: str | None) -> str:
    """The model a spec runs: `openai:URL:MODEL` -> MODEL (a served packaged model keeps its name), else the
    spec itself."""
    spec = (spec or "").strip()
    if spec.startswith("openai:"):
        return spec.rsplit(":", 1)[-1].strip()
    return spec


def default_reference(acting: str | None) -> str:
    """The `paired` variant's reference for acting model spec `acting`: qwen1.5b, or qwen0.5b when the
    acting model is itself qwen1.5b (in-process or served)."""
    return "qwen0.5b" if model_identity(acting) == DEFAULT_REFERENCE else DEFAULT_REFERENCE


# ---- memory rules (pure) ---------------------------------------------------------------------------
def promote(m_new: Sequence[str], m_target: Sequence[str], reward: float) -> tuple[list[str], list[str]]:
    """Eq. 4: on positive reward M_target <- M_target U M_new and M_new <- {}; else unchanged.
    Returns (m_new, m_target); duplicates are not added twice."""
    if reward > 0:
        merged = list(m_target) + [m for m in m_new if m not in m_target]
        return [], merged
    return list(m_new), list(m_target)


def drop_latest(m_new: Sequence[str]) -> list[str]:
    """Eq. 8: forget the most recent exploratory insight (no-op when there is none)."""
    return list(m_new[:-1])


def meta_due(t: int, interval: int) -> bool:
    """Algorithm 1 line 12: f_meta runs when t mod Δt = 0 (t counts from 0)."""
    return interval > 0 and t % interval == 0


@dataclasses.dataclass
class Selection:
    """The outcome of the similarity check at one step."""

    action: str
    m_new: list[str]
    similarities: list[float]
    samples: int


def select_action(sample: Callable[[list[str], int], str], m_new: Sequence[str], reference_action: str | None,
                  similarity: Callable[[str, str], float], tau: float,
                  max_samples: int = DEFAULT_MAX_SAMPLES) -> Selection:
    """Algorithm 1 lines 6-10 and Eq. 8: sample a reasoning action with the current M_new; if its
    similarity δ to the reference action is below tau, drop THE latest M_new entry (once: Eq. 8 discards
    "the most recently generated meta-cognition") and resample with that memory until δ >= tau or
    `max_samples` samples were drawn in all; the last sample is executed. `sample(m_new, attempt)`
    returns an action (resamples differ through the attempt's seed and temperature). With no reference
    action (ablation) the first sample is taken as is.

    Choices the paper leaves open: the drop is permanent (the entry is "discarded", so later steps do
    not see it either); later resamples of the same step drop nothing more (Algorithm 1 line 9 repeats
    the sampling, not the dropping); N_trials-style `max_samples` counts the first sample too (5 in all).
    """
    if max_samples < 1:
        raise ValueError(f"max_samples must be >= 1, got {max_samples}.")
    memory = list(m_new)
    action = sample(memory, 0)
    if reference_action is None:
        return Selection(action, memory, [], 1)
    sims = [float(similarity(action, reference_action))]
    if sims[-1] < tau:
        memory = drop_latest(memory)
    while sims[-1] < tau and len(sims) < max_samples:
        action = sample(memory, len(sims))
        sims.append(float(similarity(action, reference_action)))
    return Selection(action, memory, sims, len(sims))


def clean_insight(text: str | None, max_chars: int = MAX_INSIGHT_CHARS) -> str:
    """First non-empty line of an f_meta reply without list markers, bounded; '' if unusable."""
    for line in (text or "").splitlines():
        line = line.strip().lstrip("-*•> ").strip()
        if line.lower().startswith("insight:"):
            line = line[len("insight:"):].strip()
        if any(c.isalpha() for c in line):
            return line[:max_chars]
    return ""


def cosine(embedder: Embedder, a: str, b: str) -> float:
    """Cosine similarity of two texts under an L2-normalising embedder (empty text -> 0)."""
    if not a.strip() or not b.strip():
        return 0.0
    if a.strip().lower() == b.strip().lower():
        return 1.0
    e_2xD = np.asarray(embedder.encode([a, b]), dtype=np.float32)
    return float(np.clip(e_2xD[0] @ e_2xD[1], -1.0, 1.0))


# ---- the agent -----------------------------------------------------------------------------------------
META_PROMPT = (
    "You are the meta-cognition module of an agent. Read the task and the recent trajectory and write ONE "
    "short, concrete strategy insight for the next steps (what to do, what to avoid). Reply with one "
    "sentence.\n"
)


class RefReaAgent(TranscriptAgent, LazyEmbedder):
    """Reasoning model + reference model + meta-cognition; see the module docstring."""

    name = "refrea"
    stop_after_success = True  # Algorithm 1 line 3: trials run until the task is solved or N_trials

    def __init__(self, llm: LLM, *, reference_llm: LLM | None = None, embedder: Embedder | None = None,
                 embedder_name: str | None = None, tau: float = DEFAULT_TAU,
                 max_samples: int = DEFAULT_MAX_SAMPLES, meta_interval: int = 5, no_reference: bool = False,
                 no_metacognition: bool = False, max_tokens: int = prompting.THOUGHT_TOKENS, meta_tokens: int = 48,
                 context_tokens: int = 3000, temperature: float = FIRST_TEMPERATURE,
                 resample_temperature: float = 0.7,
                 seed: int | None = 0):
        if not 0.0 <= tau <= 1.0:
            raise ValueError(f"tau must be in [0, 1], got {tau}.")
        if meta_interval < 1:
            raise ValueError(f"meta_interval must be >= 1, got {meta_interval}.")
        if max_samples < 1:
            raise ValueError(f"max_samples must be >= 1, got {max_samples}.")
        super().__init__(llm, max_tokens=max_tokens, context_tokens=context_tokens, temperature=temperature,
                         seed=seed)
        self.reference_llm = reference_llm or llm
        self._embedder = embedder
        self.embedder_name = embedder_name
        self.tau = float(tau)
        self.no_reference = bool(no_reference)
        self.no_metacognition = bool(no_metacognition)
        self.max_samples = min(int(max_samples), 3) if no_metacognition else int(max_samples)
        self.meta_interval = int(meta_interval) * (2 if no_metacognition else 1)
        self.meta_tokens, self.resample_temperature = meta_tokens, resample_temperature
        self.m_new: list[str] = []
        self.m_target: list[str] = []
        self.trials = 0
        self.solved = False
        self._reset_counters()

    def _reset_counters(self) -> None:
        """The episode's own statistics (the transcript itself is the base's)."""
        self._last_result_id: int | None = None
        self._sims: list[float] = []
        self._samples: list[int] = []
        self._promotions = 0

    # -- episode lifecycle -------------------------------------------------------------------------
    def begin_episode(self, obs: Observation, *, task_id: str, episode: int, env: TextEnv) -> None:
        super().begin_episode(obs, task_id=task_id, episode=episode, env=env)
        self._reset_counters()

    def observe(self, result: StepResult) -> None:
        """Reward of the last executed action (Algorithm 1 lines 16-19)."""
        self._last_result_id = id(result)
        if result.reward > 0 and self.m_new:
            self._promotions += 1
        self.m_new, self.m_target = promote(self.m_new, self.m_target, float(result.reward))

    def _poll_env_reward(self) -> None:
        result = getattr(self._env, "last_result", None)
        if isinstance(result, StepResult) and id(result) != self._last_result_id:
            self.observe(result)

    # -- prompts -----------------------------------------------------------------------------------
    @staticmethod
    def memory_text(m_target: Sequence[str], m_new: Sequence[str]) -> str:
        """The two memories as the prompts show them (validated first)."""
        text = ""
        if m_target:
            text += "Validated insights:\n" + "".join(f"- {m}\n" for m in m_target)
        if m_new:
            text += "New insights (exploratory):\n" + "".join(f"- {m}\n" for m in m_new)
        return text

    def query(self, m_new: Sequence[str], m_target: Sequence[str]) -> str:
        """Q(H_t, M_new, M_target): examples, memory, task, the most recent steps that fit, '>' cue."""
        return self.build_prompt(memory=self.memory_text(m_target, m_new))

    def _generate(self, llm: LLM, prompt: str, attempt: int, temperature: float | None = None) -> str:
        """One action line: the first sample at `temperature` (default: the agent's), resamples hotter."""
        first = self.temperature if temperature is None else temperature
        temp = first if attempt == 0 else max(first, self.resample_temperature)
        seed = None if self.seed is None else self.seed + 7919 * self._t + attempt
        text = llm.complete(prompt, n=1, temperature=temp, max_tokens=self.max_tokens, stop=["\n"], seed=seed)[0]
        return prompting.parse_action(text).action

    def _meta(self) -> str:
        """f_meta(H_t, M_new, M_target): one insight line."""
        steps = prompting.format_steps(self._steps[-10:])
        prompt = (META_PROMPT + self.memory_text(self.m_target, self.m_new) + "\nTask: " + self._task + "\n"
                  + steps + (f"> {self._last_action}\n" if self._last_action else "") + "Insight:")
        seed = None if self.seed is None else self.seed + 104729 * self._t
        text = self.llm.complete(prompt, n=1, temperature=0.0, max_tokens=self.meta_tokens,
                                 stop=["\n\n"], seed=seed)[0]
        return clean_insight(text)

    # -- one step ------------------------------------------------------------------------------------
    def act(self, observation: str, admissible_actions: list[str] | None) -> Decision:
        self._poll_env_reward()
        self._record_observation(observation)
        reference = None
        if not self.no_reference:
            reference = self._generate(self.reference_llm, self.query([], self.m_target), 0, temperature=0.0)

        def sample(m_new: list[str], attempt: int) -> str:
            memory_new, memory_target = ([], []) if self.no_metacognition else (m_new, self.m_target)
            return self._generate(self.llm, self.query(memory_new, memory_target), attempt)

        sel = select_action(sample, self.m_new, reference, lambda a, b: cosine(self.embedder, a, b),
                            self.tau, self.max_samples)
        self.m_new = sel.m_new
        info: dict[str, Any] = {"samples": sel.samples, "reference_action": reference,
                                "similarity": sel.similarities[-1] if sel.similarities else None,
                                "similarities": sel.similarities}
        action = sel.action
        if not action:
            self._invalid += 1
            info["invalid"] = "unusable reasoning-model output"
        self._last_action = action or "(invalid output)"
        if meta_due(self._t, self.meta_interval):
            insight = self._meta()
            if insight:
                self.m_new = self.m_new + [insight]
                info["insight"] = insight
        info.update(m_new=len(self.m_new), m_target=len(self.m_target))
        if sel.similarities:
            self._sims.append(sel.similarities[-1])
        self._samples.append(sel.samples)
        self._t += 1
        return Decision(action=action, info=info)

    def end_episode(self, outcome: EpisodeOutcome) -> None:
        self._poll_env_reward()  # the last step's reward arrives after the last act()
        self.trials += 1
        self.solved = self.solved or bool(outcome.success)
        super().end_episode(outcome)

    def episode_extras(self) -> dict[str, Any]:
        sims = self._sims
        return {"similarities": sims, "mean_similarity": float(np.mean(sims)) if sims else None,
                "samples_per_step": self._samples, "promotions": self._promotions,
                "invalid_actions": self._invalid, "tau": self.tau,
                "ablation": ("no_reference" if self.no_reference else "no_metacognition"
                             if self.no_metacognition else None)}

    # -- memory across trials ----------------------------------------------------------------------------
    def memory(self) -> dict[str, Any]:
        return {"m_target": list(self.m_target), "m_new": list(self.m_new), "trials": self.trials,
                "solved": self.solved}

    def load_memory(self, memory: dict[str, Any]) -> None:
        memory = memory or {}
        self.m_target = [str(m) for m in memory.get("m_target", [])]
        self.m_new = [str(m) for m in memory.get("m_new", [])]
        self.trials = int(memory.get("trials", 0))
        self.solved = bool(memory.get("solved", False))


# ---- factory -------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Options:
    """RefRea's options (paper 003, Algorithm 1 and the Table 5 ablations)."""

    tau: float = setting(DEFAULT_TAU, Allowed(lambda v, _: 0.0 <= v <= 1.0, "0 <= tau <= 1"))
    """Similarity threshold: reasoning and reference proposals with cosine below it are resampled."""
    max_samples: int = setting(DEFAULT_MAX_SAMPLES, integer_at_least(1))
    """Reasoning-model samples per step, the last one forced."""
    meta_interval: int = setting(5, integer_at_least(1))
    """Δt: steps between meta-cognition insights."""
    no_reference: bool = False
    """Table 5 ablation: no reference model and no similarity check."""
    no_metacognition: bool = False
    """Table 5 ablation: the reasoning model sees no memory."""
    reference_model: str = SAME_MODEL
    """`same` (the paper's: the acting model, greedy), `paired` (the two-model variant: qwen1.5b, or qwen0.5b
    for a qwen1.5b actor) or a model spec of another reference (module docstring)."""
    embedder: str | None = None
    """Sentence embedder of the similarity check (name or folder); none = the packaged MiniLM."""
    max_tokens: int = setting(prompting.THOUGHT_TOKENS, integer_at_least(1))
    """Token limit of one reasoning line."""
    meta_tokens: int = setting(48, integer_at_least(1))
    """Token limit of one meta-cognition insight."""
    context_tokens: int = setting(3000, integer_at_least(1))
    """Prompt budget in tokens; the oldest steps are dropped beyond it."""
    temperature: float = setting(FIRST_TEMPERATURE, number_at_least(0))
    """Temperature of the reasoning model's first sample of a step (the reference decodes greedily; 0 = greedy,
    which with reference_model=same makes the similarity 1.0 whenever M_new is empty)."""
    resample_temperature: float = setting(0.7, number_at_least(0))
    """Temperature of the resamples after a rejected proposal."""


def make_agent(env_name: str, llm: LLM, opts: Options | Mapping[str, Any] | None = None) -> RefReaAgent:
    opts = dataclasses.asdict(build_options(Options, opts, "refrea"))
    reference = str(opts.pop("reference_model", None) or SAME_MODEL).strip()
    embedder_name = opts.pop("embedder", None)
    agent = RefReaAgent(llm, embedder_name=embedder_name, **opts)  # validates the options first
    if not agent.no_reference and reference != SAME_MODEL:
        from llm_side.backends import LazyLLM, check_available

        acting = getattr(llm, "name", None)
        reference = default_reference(acting) if reference == PAIRED else reference
        try:
            check_available(reference)
        except (OSError, RuntimeError, ValueError) as exc:
            raise ValueError(f"refrea's reference model: {exc}; or pass --agent-opt reference_model=same (the "
                             "paper's: the acting model) or another model spec") from None
        if model_identity(reference) == model_identity(acting):
            import warnings

            warnings.warn(f"refrea: the reference model '{reference}' is the acting model '{acting}'; that is "
                          "reference_model=same run twice", stacklevel=2)
        agent.reference_llm = LazyLLM(reference)
    return agent
