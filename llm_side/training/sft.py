"""SFT of the Actor M_a with LoRA on successful episodes (paper 000 §4.1.3, Algorithm 3).

The actor is trained on the prompt it sees at run time: every step of a successful episode becomes one
prompt-completion row whose prompt is exactly what the Reflexion/MUSE actor builds at that step (the
env's few-shot examples, the reflections loaded for that episode, the task, the transcript so far within
the context budget, the '>' cue; built by the agent's own `build_prompt`) and whose completion is what
follows that cue in the transcript: the action, the env's answer and the next step's cue
(' action\nobservation\n>'). Only the completion is trained. The paper says only "SFT with only
successful episodes"; one row per step is our choice.

Why the completion ends with the next '>' cue and no end-of-sequence token: in MUSE the actor is also the
world model whose look-ahead rollouts run "up to the context window" (paper 000 §4.1.3), and at run time a
step is separated from the next by the observation and the '>' cue, never by EOS. trl appends EOS to every
text completion ("Adding EOS to train dataset"); on the packaged SmolLM2 that one token was 56-81% of a
' action\n' row's completion loss, and the fine-tuned actor's rollouts stopped after one action. The rows
are therefore tokenized here (`tokenize_rows`: input_ids + completion_mask), which trl trains on as given.

Lengths come from the data: the sequence limit is the longest row (nothing is truncated); a row longer
than the model's window is rebuilt with the oldest transcript steps dropped (as the actor itself does at
run time with a smaller budget). The metrics say how many rows were offered and how many were trained on.

Also holds the LoRA plumbing shared with `dpo.py`: load a base folder, wrap it in LoRA, save adapter +
merged model atomically.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from muse_common.files import atomic_write_json
from muse_common.run_lock import pid_alive

METRICS_FILE = "metrics.json"
ADAPTER_DIR = "adapter"
MERGED_DIR = "merged"


STEP_CUE = ">"
"""What ends an SFT completion: the cue of the next step in the run-time transcript ('> action\nobs\n>')."""


def completion_text(action: str, observation: str) -> str:
    """What follows the '>' cue in the transcript at run time: the action, the env's answer and the
    next step's cue (`prompting.format_steps` + the agent's '>' tail), never an end-of-sequence token."""
    return f" {action}\n{observation.strip()}\n{STEP_CUE}"


def spaced(items: Sequence[Any], k: int | None) -> list[Any]:
    """At most `k` of `items`, evenly spaced from the first to the last (all when k is None or enough)."""
    n = len(items)
    if k is None or n <= k:
        return list(items)
    if k == 1:
        return [items[n // 2]]
    return [items[round(i * (n - 1) / (k - 1))] for i in range(k)]


def sft_examples(records: Iterable[dict[str, Any]], env: Any = None, *, context_tokens: int = 6000,
                 fits: Callable[[str], bool] | None = None, per_episode: int | None = None,
                 grouped: bool = False) -> Any:
    """Prompt-completion rows from the successful records (runner fields: task, episode, memory,
    first_observation, task_text, actions, observations), one per step, in the run-time prompt format.
    `env` supplies the few-shot examples (`react_examples(task_id)`, as the agents get them); the
    reflections are the task's memory before that episode (`records.memory_before`). `fits(prompt +
    completion)` (e.g. "within the model's window"): a row that does not fit is rebuilt with a smaller
    transcript budget, so the transcript's oldest steps go first and the completion is always kept.
    `per_episode`: keep at most that many rows of an episode, evenly spaced over its steps (SFT sized for a
    CPU); `grouped`: one list of rows per game (its episodes' rows, in record order) instead of one flat
    list, so that `hold_out` holds out games: two wins of one game are near copies of each other (Reflexion
    replays a won game), and holding one out as another "game" would test the other's rows."""
    from llm_side.agents.reflexion import ReflexionAgent
    from llm_side.harness.contracts import Observation
    from llm_side.harness.records import memory_before

    records = list(records)
    actor = ReflexionAgent(None, context_tokens=context_tokens)  # prompt building only: never calls an LLM
    groups: dict[str, list[dict[str, str]]] = {}
    for r in records:
        if not r.get("success") or not r.get("actions"):
            continue
        rows: list[dict[str, str]] = []
        task, episode = str(r["task"]), int(r["episode"])
        actor.load_memory({"reflections": memory_before(records, task, episode).get("reflections", [])})
        first = r.get("first_observation") or ""
        actor.begin_episode(Observation(text=first, task=r.get("task_text") or ""), task_id=task, episode=episode,
                            env=env)
        observation = first
        for action, next_obs in zip(r["actions"], r.get("observations") or [], strict=False):
            actor._record_observation(observation)
            completion = completion_text(action, next_obs)
            prompt = actor.build_prompt()
            while fits is not None and not fits(prompt + completion) and actor.context_tokens > 64:
                actor.context_tokens = actor.context_tokens * 3 // 4  # drop the transcript's head
                prompt = actor.build_prompt()
            actor.context_tokens = context_tokens
            rows.append({"prompt": prompt, "completion": completion})
            actor._last_action = action
            observation = next_obs
        groups.setdefault(task, []).extend(spaced(rows, per_episode))
    return list(groups.values()) if grouped else [row for g in groups.values() for row in g]


def hold_out(games: Sequence[Sequence[dict[str, str]]], n: int
             ) -> tuple[list[dict[str, str]], list[dict[str, str]], str]:
    """(train rows, held-out rows, how they were held out): whole games from the end until `n` rows are
    held out, at least one game kept for training ("games"); from a single game its last rows, at most
    half of them ("rows of a trained game": the same episode, so a weaker test); n=0: none ("none")."""
    games = [list(g) for g in games if g]
    if n <= 0 or not games:
        return [r for g in games for r in g], [], "none"
    if len(games) >= 2:
        held: list[dict[str, str]] = []
        while len(games) > 1 and len(held) < n:
            held = games.pop() + held
        return [r for g in games for r in g], held[:max(n, 1)], "games"
    rows = games[0]
    k = min(n, len(rows) // 2)
    return rows[:len(rows) - k], rows[len(rows) - k:], "rows of a trained game" if k else "none"


# -- LoRA plumbing shared with dpo.py --------------------------------------------------------------------

TRAIN_DTYPES = ("float32", "bfloat16")
"""The dtypes the base model can be loaded in for LoRA training. bfloat16 halves the memory and, on a CPU
with AMX (or a GPU), runs the matmuls natively (`benchmarks/lora_step.py` times a step in both on the machine
at hand). The LoRA weights and the optimizer stay float32 either way."""


def load_base(base: str | Path, dtype: str = "float32") -> tuple[Any, Any]:
    """Model + tokenizer from a local folder (no hub: HF_HUB_OFFLINE is forced), weights in `dtype`
    (`TRAIN_DTYPES`)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype not in TRAIN_DTYPES:
        raise ValueError(f"unknown training dtype {dtype!r}; use one of {', '.join(TRAIN_DTYPES)}")

    base = Path(base)
    if not (base / "config.json").is_file():
        raise FileNotFoundError(f"no transformers model in {base} (config.json missing); pass a folder written by "
                                "save_pretrained, e.g. the backend's unpacked model cache.")
    tok = AutoTokenizer.from_pretrained(base, local_files_only=True)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True, dtype=getattr(torch, dtype))
    return model, tok


def wrap_lora(model: Any, r: int = 8) -> Any:
    """LoRA on the attention and MLP projections (whichever the architecture has)."""
    from peft import LoraConfig, get_peft_model

    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    targets = [t for t in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                           "c_attn", "c_proj") if t in names]
    if not targets:
        raise ValueError(f"no known projection layers for LoRA in {type(model).__name__}.")
    cfg = LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def lora_snapshot(model: Any) -> dict[str, Any]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


def lora_change(before: dict[str, Any], after: dict[str, Any]) -> float:
    """Largest absolute change of any LoRA weight (0.0 = training did nothing)."""
    return max((float((after[n] - before[n]).abs().max()) for n in before), default=0.0)


@contextlib.contextmanager
def staging(out_dir: str | Path) -> Iterator[Path]:
    """A temp folder beside `out_dir` that replaces it only if the block finishes. Its name carries the
    process id, so the temp folder of a stage that was killed (a training stage holds several GB and the OOM
    killer may pick it) is removed by the next run once that process is gone, not left to fill the disk."""
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".{out.name}.tmp-*-*"):
        pid = stale.name.removeprefix(f".{out.name}.tmp-").split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)) and stale.is_dir() \
                and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-{os.getpid()}-"))
    try:
        yield tmp
        shutil.rmtree(tmp / "trainer", ignore_errors=True)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def save(peft_model: Any, tok: Any, folder: Path, *, merge: bool, metrics: dict[str, Any]) -> None:
    """adapter/ (LoRA only), merged/ (a plain model usable as `--model hf:DIR`), metrics.json last."""
    peft_model.save_pretrained(folder / ADAPTER_DIR)
    tok.save_pretrained(folder / ADAPTER_DIR)
    if merge:
        merged = peft_model.merge_and_unload()
        # trl trains with the KV cache off (gradient checkpointing); the saved model generates at run time,
        # where generating without the cache recomputes the whole prompt for every token
        merged.config.use_cache = True
        if getattr(merged, "generation_config", None) is not None:
            merged.generation_config.use_cache = True
        merged.save_pretrained(folder / MERGED_DIR)
        tok.save_pretrained(folder / MERGED_DIR)
    atomic_write_json(folder / METRICS_FILE, metrics)


def model_window(model: Any) -> int | None:
    """The model's context window in tokens (`max_position_embeddings`), None when it does not say."""
    cfg = getattr(model, "config", None)
    value = getattr(cfg, "max_position_embeddings", None) if cfg is not None else None
    return int(value) if value else None


def tokenize_rows(rows: Sequence[dict[str, str]], tok: Any) -> list[dict[str, list[int]]]:
    """input_ids + completion_mask of prompt + completion, with no token added (no BOS/EOS beyond what
    the tokenizer itself writes for the text). The completion starts where the tokenized prompt and
    prompt + completion diverge (tokens may merge across the boundary), as trl does."""
    out = []
    for row in rows:
        prompt_ids = tok(row["prompt"], add_special_tokens=False)["input_ids"]
        ids = tok(row["prompt"] + row["completion"], add_special_tokens=False)["input_ids"]
        start = 0
        while start < min(len(prompt_ids), len(ids)) and prompt_ids[start] == ids[start]:
            start += 1
        out.append({"input_ids": ids, "completion_mask": [0] * start + [1] * (len(ids) - start)})
    return out


def log(line: str) -> None:
    """One progress line of a training stage on stderr (stdout carries the stage's JSON)."""
    print(line, file=sys.stderr, flush=True)


def run_sft(base: str | Path, rows: Sequence[dict[str, str]], out_dir: str | Path, *, max_steps: int = 100,
            lr: float = 2e-4, lora_r: int = 8, seed: int = 0, merge: bool = True,
            heldout: Sequence[dict[str, str]] = (), base_model: str | None = None,
            extra: dict[str, Any] | None = None, dtype: str = "float32") -> dict[str, Any]:
    """LoRA-SFT of the model in folder `base` on prompt-completion `rows`; writes `out_dir` atomically.

    Rows are tokenized here (no EOS appended, see the module docstring); the sequence limit is the longest
    row, so nothing is truncated. Rows longer than the model's window, or with an empty completion, are
    left out and counted (`rows_left_out`); none left is an error. Every step logs one stderr line as it
    ends. `heldout` rows (not trained on) measure the trained actor against the base (`effect`: completion
    NLL and greedy actions); the metrics and a stderr line say whether it differs. `base_model`: the
    `--model` spec of `base`, recorded so that `compare --trained` can check the base. `dtype`: the base's
    weights during training and in the merged model (`TRAIN_DTYPES`; the LoRA weights train in float32)."""
    if not rows:
        raise ValueError("no successful episodes to fine-tune the actor on: the collection run has no "
                         "success; run more episodes or a stronger --model.")
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    model, tok = load_base(base, dtype)
    window = model_window(model)
    encoded = tokenize_rows(rows, tok)
    kept = [e for e in encoded if sum(e["completion_mask"]) and (window is None or len(e["input_ids"]) <= window)]
    left_out = len(encoded) - len(kept)
    if not kept:
        raise ValueError(f"none of the {len(rows)} SFT rows fits the model's window of {window} tokens with its "
                         "completion; fine-tune a model with a longer window (--base) or lower the agents' "
                         "context_tokens.")
    longest = max(len(e["input_ids"]) for e in kept)
    peft_model = wrap_lora(model, lora_r)
    before = lora_snapshot(peft_model)
    with staging(out_dir) as tmp:
        cfg = SFTConfig(output_dir=str(tmp / "trainer"), max_steps=max_steps, learning_rate=lr,
                        per_device_train_batch_size=min(2, len(kept)), logging_steps=1, save_strategy="no",
                        report_to=[], seed=seed, max_length=longest, completion_only_loss=True,
                        use_cpu=True, bf16=False, fp16=False, dataloader_num_workers=0, disable_tqdm=True)
        trainer = SFTTrainer(model=peft_model, args=cfg, train_dataset=Dataset.from_list(kept),
                             processing_class=tok, callbacks=[StepLog("SFT", max_steps)])
        trained = len(trainer.train_dataset)
        if not trained:
            raise ValueError(f"trl left none of the {len(kept)} SFT rows to train on; nothing was fine-tuned.")
        log(f"SFT: training on {trained} of {len(rows)} rows offered (longest {longest} tokens, model window "
            f"{window}; {left_out} left out: longer than the window or no completion)")
        result = trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        metrics = {"rows": len(rows), "rows_trained": trained, "rows_left_out": left_out, "max_length": longest,
                   "model_window": window, "steps": int(result.global_step), "losses": losses,
                   "final_loss": float(result.training_loss),
                   "lora_delta": lora_change(before, lora_snapshot(peft_model)), "base": str(base),
                   "base_model": base_model, "lr": lr, "lora_rank": lora_r, "dtype": dtype,
                   "train_s": round(trainer_seconds(trainer), 1),
                   **(extra or {})}
        metrics["effect"] = measure_effect(peft_model, tok, heldout)
        log(effect_line(metrics["effect"]))
        save(peft_model, tok, tmp, merge=merge, metrics=metrics)
    return metrics


def trainer_seconds(trainer: Any) -> float:
    """Wall seconds of `trainer.train()` as the trainer logged them (0 when not logged)."""
    for h in reversed(trainer.state.log_history):
        if "train_runtime" in h:
            return float(h["train_runtime"])
    return 0.0


class StepLog:
    """A transformers TrainerCallback (duck-typed: imported lazily) that prints one flushed stderr line per
    logged step, so a long CPU stage shows progress as it goes rather than when it ends."""

    def __init__(self, stage: str, total: int):
        self.stage, self.total = stage, total
        self._t0: float | None = None

    def __getattr__(self, name: str) -> Any:  # every other callback event: nothing to do
        if name.startswith("on_"):
            return lambda *a, **k: None
        raise AttributeError(name)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        import time

        self._t0 = time.monotonic()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
        import time

        if not logs or "loss" not in logs:
            return
        spent = time.monotonic() - (self._t0 or time.monotonic())
        log(f"{self.stage} step {state.global_step}/{self.total}: loss {float(logs['loss']):.4f} ({spent:.0f} s)")


def completion_nll(model: Any, tok: Any, rows: Sequence[dict[str, str]]) -> float:
    """Mean negative log-likelihood per completion token of `rows` (nats): how well `model` predicts the
    expert's action and the game's answer at the run-time prompt."""
    import torch

    total, count = 0.0, 0
    with torch.inference_mode():
        for enc in tokenize_rows(rows, tok):
            ids = torch.tensor([enc["input_ids"]])
            logits = model(input_ids=ids).logits[0, :-1].float()
            mask = torch.tensor(enc["completion_mask"][1:], dtype=torch.bool)
            nll = torch.nn.functional.cross_entropy(logits[mask], ids[0, 1:][mask], reduction="sum")
            total, count = total + float(nll), count + int(mask.sum())
    return total / max(count, 1)


GREEDY_MIN_TOKENS = 24
"""The fewest new tokens a greedy action gets (an ALFWorld action is a few words)."""
GREEDY_MARGIN_TOKENS = 8
"""New tokens beyond the recorded line's own: room for its newline and for a longer line to show as one."""


def greedy_budget(tok: Any, recorded: str) -> int:
    """New tokens for a greedy action compared with `recorded`: enough to write the whole recorded line and
    more, so that a long `think:` line is never cut short and counted a mismatch."""
    line = recorded.strip().split("\n", 1)[0]
    return max(GREEDY_MIN_TOKENS, len(tok(line, add_special_tokens=False).input_ids) + GREEDY_MARGIN_TOKENS)


def greedy_actions(model: Any, tok: Any, rows: Sequence[dict[str, str]],
                   max_new_tokens: int | None = None) -> list[str]:
    """The greedy next action (first line after the '>' cue) of `model` at each row's prompt, each given
    `greedy_budget` new tokens for its row's recorded completion (or `max_new_tokens`)."""
    import torch

    out = []
    with torch.inference_mode():
        for row in rows:
            ids = tok(row["prompt"], return_tensors="pt", add_special_tokens=False).input_ids
            budget = max_new_tokens or greedy_budget(tok, row.get("completion", ""))
            gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=budget,
                                 do_sample=False, use_cache=True, pad_token_id=tok.pad_token_id)
            text = tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True)
            out.append(text.strip().split("\n", 1)[0].strip())
    return out


def measure_effect(peft_model: Any, tok: Any, heldout: Sequence[dict[str, str]]) -> dict[str, Any]:
    """The trained actor against its base (the adapter switched off) on `heldout` rows: completion NLL,
    greedy actions, how many changed and how many match the recorded action. `differs`: any greedy action
    changed or the NLL moved by more than 0.01 nats/token."""
    if not heldout:
        return {"heldout_rows": 0, "differs": None, "note": "no held-out rows: effect not measured"}
    was_training = peft_model.training
    peft_model.eval()
    try:
        nll_trained, acts_trained = completion_nll(peft_model, tok, heldout), greedy_actions(peft_model, tok, heldout)
        with peft_model.disable_adapter():
            nll_base, acts_base = completion_nll(peft_model, tok, heldout), greedy_actions(peft_model, tok, heldout)
    finally:
        peft_model.train(was_training)
    target = [row["completion"].strip().split("\n", 1)[0].strip() for row in heldout]
    changed = sum(a != b for a, b in zip(acts_base, acts_trained, strict=True))
    return {"heldout_rows": len(heldout), "nll_base": round(nll_base, 4), "nll_trained": round(nll_trained, 4),
            "greedy_changed": changed,
            "greedy_match_base": sum(a == t for a, t in zip(acts_base, target, strict=True)),
            "greedy_match_trained": sum(a == t for a, t in zip(acts_trained, target, strict=True)),
            "greedy_base": acts_base, "greedy_trained": acts_trained, "recorded": target,
            "differs": bool(changed or abs(nll_trained - nll_base) > 0.01)}


def effect_line(effect: dict[str, Any]) -> str:
    """One stderr line on whether SFT changed the actor (and, when it did not, what to raise)."""
    if effect.get("differs") is None:
        return "SFT effect: not measured (no held-out rows; --sft-heldout 0 or too few successful steps)"
    figures = (f"held-out NLL {effect['nll_base']:.3f} -> {effect['nll_trained']:.3f} nats/token over "
               f"{effect['heldout_rows']} rows, {effect['greedy_changed']} of {effect['heldout_rows']} greedy actions "
               f"changed, recorded action matched {effect['greedy_match_base']} -> {effect['greedy_match_trained']}")
    if effect["differs"]:
        return f"SFT effect: the trained actor differs from the base: {figures}"
    return (f"SFT effect: WARNING: the trained actor does NOT measurably differ from the base ({figures}); raise "
            "--sft-steps, --sft-lr or --lora-rank")


def build_tiny_llama(out_dir: str | Path, corpus: Sequence[str], *, vocab_size: int = 400, hidden: int = 32,
                     layers: int = 2, seed: int = 0) -> Path:
    """A tiny random Llama + a BPE tokenizer trained on `corpus`, saved to `out_dir` (no hub).
    For smoke runs of the training stages and for tests; not a useful policy."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(list(corpus), trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                  pad_token="<pad>")
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=2048, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    out = Path(out_dir)
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out
