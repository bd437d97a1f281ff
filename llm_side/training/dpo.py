"""DPO of the reflection model M_rx with LoRA (paper 000 §4.1.3, Algorithm 3 pre-deployment).

Preference data from the Reflexion collection run, as the paper defines it: a reflection written after
episode e_i is *positive* when e_i failed and e_{i+1}, which used it, succeeded; *negative* when e_i
succeeded and e_{i+1} failed despite it. Nothing else is labelled by default.

Choices the paper leaves open (it does not say how a pair is formed; DPO needs a shared prompt):
- a pair is (positive's prompt, positive's text, a negative's text), the negative taken from the SAME
  task (up to `max_per_positive` of them, newest first); a positive with no same-task negative yields no
  pair by default;
- named options, off by default, for small collection runs with few success->failure turns:
  `include_unhelpful` (a reflection after which a failure stayed a failure also counts as negative) and
  `cross_task` (a negative may come from another task of the same group, e.g. ALFWorld task type, then
  any task; its text then answers another task's prompt, an approximation).

Lengths come from the data. trl's DPOConfig default `max_length=1024` drops every pair whose prompt
reaches it, and the shortest ALFWorld reflection prompt (instruction + the two Reflexion examples, empty
transcript) is 1535 tokens (SmolLM2 tokenizer): at that default every pair was dropped and training
failed with `num_samples=0`. Here the limit is the longest pair (prompt + the longer reply + EOS), so
nothing is truncated; a pair longer than the model's window has the oldest steps of its transcript
dropped (`shorten_transcript`, as the Reflexion agent fits its query to its budget); the metrics and
one stderr line say how many pairs were trained on, and none left is one clear error.
"""

from __future__ import annotations

import collections
import itertools
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from llm_side.training import sft as lora_io  # LoRA plumbing shared with SFT


def reflection_outcomes(records: Iterable[dict[str, Any]], include_unhelpful: bool = False
                        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(positive, negative) reflections: dicts with task, episode, prompt, text. Positive: fail -> success
    after it; negative: success -> fail after it (paper); fail -> fail too with `include_unhelpful`."""
    by_task: dict[str, dict[int, dict[str, Any]]] = collections.defaultdict(dict)
    for r in records:
        by_task[str(r["task"])][int(r["episode"])] = r
    pos: list[dict[str, Any]] = []
    neg: list[dict[str, Any]] = []
    for task, eps in by_task.items():
        for e, cur in sorted(eps.items()):
            nxt = eps.get(e + 1)
            if nxt is None or not cur.get("reflection") or not cur.get("reflection_prompt"):
                continue
            item = {"task": task, "episode": e, "prompt": cur["reflection_prompt"], "text": cur["reflection"]}
            if not cur["success"] and nxt["success"]:
                pos.append(item)
            elif cur["success"] and not nxt["success"]:
                neg.append(item)
            elif include_unhelpful and not cur["success"] and not nxt["success"]:
                neg.append(item)
    return pos, neg


def preference_pairs(records: Iterable[dict[str, Any]], *, group: Callable[[str], str] | None = None,
                     include_unhelpful: bool = False, cross_task: bool = False,
                     max_per_positive: int = 2) -> list[dict[str, str]]:
    """DPO rows {'prompt', 'chosen', 'rejected'} (chosen/rejected start with a space: they continue
    the 'New plan:' cue). Same-task negatives only unless `cross_task` (then same `group` first)."""
    pos, neg = reflection_outcomes(records, include_unhelpful)
    group = group or (lambda task: "")
    rows: list[dict[str, str]] = []
    for p in pos:
        pool = neg if cross_task else [n for n in neg if n["task"] == p["task"]]
        ranked = sorted(pool, key=lambda n: (n["task"] != p["task"], group(n["task"]) != group(p["task"]),
                                             -n["episode"]))
        for n in itertools.islice((n for n in ranked if n["text"] != p["text"]), max_per_positive):
            rows.append({"prompt": p["prompt"], "chosen": " " + p["text"].strip(), "rejected": " " + n["text"].strip()})
    return rows


_STEP = re.compile(r"^> .*\n(?:(?!> |STATUS:).*\n)*", re.M)


def shorten_transcript(prompt: str) -> str | None:
    """The reflection prompt with the oldest step ('> action' + its observation lines) of its own
    transcript (after the last 'Here is the task' / before 'STATUS:') dropped; None when none is left."""
    status = prompt.rfind("\nSTATUS:")
    if status < 0:
        return None
    begin = max(prompt.rfind("Here is the task", 0, status), prompt.rfind("\n\n", 0, status), 0)
    body = prompt[begin:status + 1]
    m = _STEP.search(body)
    if m is None:
        return None
    marker = "[... earlier steps omitted ...]\n"
    new_body = body[:m.start()] + ("" if marker in body else marker) + body[m.end():]
    return prompt[:begin] + new_body + prompt[status + 1:]


def pair_tokens(prompt: str, pair: dict[str, str], count: Callable[[str], int]) -> int:
    """Tokens of the prompt with the longer of the two replies."""
    return max(count(prompt + pair["chosen"]), count(prompt + pair["rejected"]))


def fit_pairs(pairs: list[dict[str, str]], count: Callable[[str], int], window: int | None
              ) -> tuple[list[dict[str, str]], int]:
    """(pairs that fit `window` tokens, each shortened at its transcript's head if needed; how many
    could not be made to fit and were left out)."""
    kept, left_out = [], 0
    for pair in pairs:
        prompt = pair["prompt"]
        while window is not None and pair_tokens(prompt, pair, count) + 1 > window:
            prompt = shorten_transcript(prompt)
            if prompt is None:
                break
        if prompt is None:
            left_out += 1
        else:
            kept.append({**pair, "prompt": prompt})
    return kept, left_out


def run_dpo(base: str | Path, pairs: list[dict[str, str]], out_dir: str | Path, *, max_steps: int = 50,
            lr: float = 5e-5, beta: float = 0.1, lora_r: int = 8, seed: int = 0,
            merge: bool = True, base_model: str | None = None, dtype: str = "float32") -> dict[str, Any]:
    """LoRA-DPO of the model in folder `base` on `pairs`; writes `out_dir` atomically (adapter, merged
    model if `merge`, metrics.json). The sequence limit is the longest pair (see the module docstring).
    `dtype`: the base's weights (`sft.TRAIN_DTYPES`). Returns the metrics."""
    if not pairs:
        raise ValueError("no DPO preference pairs: no task of the collection run has both a reflection "
                         "after which a failure turned into success and one after which a success turned into "
                         "failure; run more episodes per task or more tasks, or allow the named extras "
                         "(--dpo-unhelpful, --dpo-cross-task).")
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    model, tok = lora_io.load_base(base, dtype)
    window = lora_io.model_window(model)

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    kept, left_out = fit_pairs(pairs, count, window)
    if not kept:
        raise ValueError(f"none of the {len(pairs)} DPO pairs fits the model's window of {window} tokens even "
                         "with its transcript dropped; fine-tune a model with a longer window (--base).")
    longest = max(pair_tokens(p["prompt"], p, count) for p in kept) + 1  # + the EOS trl appends
    peft_model = lora_io.wrap_lora(model, lora_r)
    before = lora_io.lora_snapshot(peft_model)
    with lora_io.staging(out_dir) as tmp:
        cfg = DPOConfig(output_dir=str(tmp / "trainer"), max_steps=max_steps, learning_rate=lr, beta=beta,
                        per_device_train_batch_size=min(2, len(kept)), gradient_accumulation_steps=1,
                        logging_steps=1, save_strategy="no", report_to=[], seed=seed,
                        max_length=longest, use_cpu=True, bf16=False, fp16=False,
                        dataloader_num_workers=0, disable_tqdm=True)
        trainer = DPOTrainer(model=peft_model, ref_model=None, args=cfg, train_dataset=Dataset.from_list(kept),
                             processing_class=tok, callbacks=[lora_io.StepLog("DPO", max_steps)])
        trained = len(trainer.train_dataset)
        if not trained:
            raise ValueError(f"trl left none of the {len(kept)} DPO pairs to train on (max_length {longest}); "
                             "nothing was trained.")
        lora_io.log(f"DPO: training on {trained} of {len(pairs)} pairs offered (longest {longest} tokens, model "
                    f"window {window}; {left_out} left out: longer than the window without their transcript)")
        result = trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        metrics = {"pairs": len(pairs), "pairs_trained": trained, "pairs_left_out": left_out, "max_length": longest,
                   "model_window": window, "steps": int(result.global_step), "losses": losses,
                   "final_loss": float(result.training_loss),
                   "lora_delta": lora_io.lora_change(before, lora_io.lora_snapshot(peft_model)), "base": str(base),
                   "base_model": base_model, "dtype": dtype}
        lora_io.save(peft_model, tok, tmp, merge=merge, metrics=metrics)
    return metrics
