"""Algorithm 3 training: SFT rows from successes, DPO pairs from reflection outcomes, a few real
LoRA optimisation steps of SFT and DPO on a tiny local Llama (finite loss, LoRA weights moved,
atomic output folder), and the pipeline's resumable M_sa stage + test-episode metrics."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from llm_side import pipeline_alfworld as pipe
from llm_side.training import dpo, sft
from muse_common.files import append_jsonl

sys.path.insert(0, str(Path(__file__).parent))


def _rec(task, episode, success, reflection=None):
    r = {"env": "alfworld", "agent": "reflexion", "task": task, "episode": episode, "success": success, "steps": 2,
         "first_observation": "Room.\nYour task is to: win.", "task_text": "win",
         "actions": ["think: plan", "win" if success else "look"], "observations": ["OK.", "done"]}
    if reflection:
        r["reflection"], r["reflection_prompt"] = reflection, f"PROMPT {task} {episode}\nNew plan:"
    return r


RECORDS = [
    _rec("a", 0, False, "go to the desk first"), _rec("a", 1, True, "keep doing that"), _rec("a", 2, False, "x"),
    _rec("b", 0, False, "look around more"), _rec("b", 1, False, "try the drawer"), _rec("b", 2, True, "ok"),
]


class _ExamplesEnv:
    def react_examples(self, task_id):
        return f"EXAMPLE GAME FOR {task_id}\n> think: an example thought\nOK.\n"


def test_sft_rows_are_the_run_time_prompts_of_successful_steps():
    """MUSE §4.1.3: the actor is fine-tuned on the prompt it sees when it acts."""
    from llm_side.agents.reflexion import ReflexionAgent
    from llm_side.backends.scripted import ScriptedLLM
    from llm_side.harness.contracts import Observation

    recs = [dict(r, memory={"reflections": [{"text": f"lesson {r['task']}{r['episode']}"}]}) for r in RECORDS]
    rows = sft.sft_examples(recs, _ExamplesEnv())
    assert len(rows) == 4  # two successful episodes x two steps; failures give none
    # the completion is what follows the cue at run time: action, the env's answer, the next cue (no EOS)
    assert [r["completion"] for r in rows] == [" think: plan\nOK.\n>", " win\ndone\n>"] * 2
    assert rows[1]["prompt"].endswith(rows[0]["prompt"][-3:].rstrip(">") + "> think: plan\nOK.\n>")
    # the prompt of a-1's second step is what the Reflexion actor itself builds at that step
    llm = ScriptedLLM(["think: plan", "win"])
    actor = ReflexionAgent(llm)
    actor.load_memory({"reflections": [{"text": "lesson a0"}]})
    actor.begin_episode(Observation(text="Room.\nYour task is to: win.", task="win"), task_id="a", episode=1,
                        env=_ExamplesEnv())
    actor.act("Room.\nYour task is to: win.", None)
    actor.act("OK.", None)
    assert rows[1]["prompt"] == llm.prompts[1] and rows[0]["prompt"] == llm.prompts[0]
    assert "EXAMPLE GAME FOR a" in rows[0]["prompt"] and "Trial 0: lesson a0" in rows[0]["prompt"]
    assert rows[2]["prompt"].count("Trial ") == 1 and "lesson b1" in rows[2]["prompt"]


def test_preference_pairs_follow_the_paper_rules():
    pos, neg = dpo.reflection_outcomes(RECORDS)  # the paper's rules are the default
    assert [(p["task"], p["episode"]) for p in pos] == [("a", 0), ("b", 1)]  # fail -> success
    assert [(n["task"], n["episode"]) for n in neg] == [("a", 1)]  # success -> fail
    _, neg2 = dpo.reflection_outcomes(RECORDS, include_unhelpful=True)
    assert ("b", 0) in [(n["task"], n["episode"]) for n in neg2]  # fail -> fail counts as unhelpful
    pairs = dpo.preference_pairs(RECORDS)
    # paper default: task b's positive has no success->failure negative in task b, so it forms no pair
    assert pairs == [{"prompt": "PROMPT a 0\nNew plan:", "chosen": " go to the desk first",
                      "rejected": " keep doing that"}]
    # named extras: fail->fail negatives, and negatives from another task
    unhelpful = dpo.preference_pairs(RECORDS, include_unhelpful=True)
    assert {"prompt": "PROMPT b 1\nNew plan:", "chosen": " try the drawer", "rejected": " look around more"} \
        in unhelpful
    cross = dpo.preference_pairs(RECORDS, cross_task=True)
    assert {"prompt": "PROMPT b 1\nNew plan:", "chosen": " try the drawer", "rejected": " keep doing that"} in cross
    assert all(p["chosen"] != p["rejected"] for p in unhelpful + cross)


def test_empty_training_data_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="no successful episodes"):
        sft.run_sft(tmp_path, [], tmp_path / "o")
    with pytest.raises(ValueError, match="no DPO preference pairs"):
        dpo.run_dpo(tmp_path, [], tmp_path / "o")
    with pytest.raises(FileNotFoundError, match="config.json"):
        sft.load_base(tmp_path)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    corpus = [r["first_observation"] + " ".join(r["actions"]) for r in RECORDS] * 4 + [
        "go to the desk first keep doing that try the drawer look around more New plan: PROMPT"] * 4
    return sft.build_tiny_llama(tmp_path_factory.mktemp("tiny") / "base", corpus)


@pytest.mark.slow
def test_sft_real_lora_steps(tiny_llama, tmp_path, monkeypatch):
    out = tmp_path / "actor"
    m = sft.run_sft(tiny_llama, sft.sft_examples(RECORDS), out, max_steps=3, lr=5e-3)
    assert m["steps"] == 3 and all(math.isfinite(x) for x in m["losses"]) and m["lora_delta"] > 0
    assert (out / "adapter" / "adapter_config.json").is_file() and (out / "merged" / "config.json").is_file()
    assert json.loads((out / "merged" / "config.json").read_text()).get("use_cache", True)  # fast generation
    assert json.loads((out / sft.METRICS_FILE).read_text())["rows"] == 4  # one row per successful step
    assert not list(tmp_path.glob(".actor.tmp-*"))  # staging folder renamed, not left behind
    from llm_side import serve
    from llm_side.backends import load_llm

    actor = load_llm(f"hf:{out / 'merged'}")
    greedy = actor.complete("Room.\n>", max_tokens=3, temperature=0.0)[0]
    assert isinstance(greedy, str) and greedy, "the trained actor wrote nothing: nothing to compare"
    # the trained actor behind `muse-llm serve --engine transformers` (what a GPU run points agents at) answers
    # with the in-process actor's greedy text
    monkeypatch.setenv("MUSE_LLM_CACHE", str(tmp_path / "cache"))  # the served copy of a temporary actor: here
    with serve.running(f"hf:{out / 'merged'}", engine="transformers", threads=1, alias="actor") as spec:
        assert spec.endswith(":actor")
        assert load_llm(spec).complete("Room.\n>", max_tokens=3, temperature=0.0)[0] == greedy


@pytest.mark.slow
def test_sft_in_bfloat16_trains_float32_lora_weights_on_bfloat16_base_weights(tiny_llama, tmp_path):
    """--train-dtype bfloat16: the base loads in bfloat16 (the speed), the LoRA weights and their optimizer
    stay float32 (small updates are not rounded away), and the merged actor is a bfloat16 model."""
    import torch

    model, _ = sft.load_base(tiny_llama, "bfloat16")
    lora = sft.wrap_lora(model)
    dtypes = {n: p.dtype for n, p in lora.named_parameters()}
    assert {d for n, d in dtypes.items() if "lora_" in n} == {torch.float32}
    assert {d for n, d in dtypes.items() if "lora_" not in n} == {torch.bfloat16}
    out = tmp_path / "actor"
    m = sft.run_sft(tiny_llama, sft.sft_examples(RECORDS), out, max_steps=2, lr=5e-3, dtype="bfloat16")
    assert m["dtype"] == "bfloat16" and all(math.isfinite(x) for x in m["losses"]) and m["lora_delta"] > 0
    assert json.loads((out / "merged" / "config.json").read_text()).get("dtype") == "bfloat16"
    with pytest.raises(ValueError, match="unknown training dtype 'float16'"):
        sft.load_base(tiny_llama, "float16")


@pytest.mark.slow
def test_sft_measures_the_trained_actor_against_the_base_and_logs_every_step(tiny_llama, tmp_path, capsys):
    """Held-out rows: completion NLL and greedy actions of the trained actor against the base (adapter off),
    and one flushed stderr line per training step."""
    games = sft.sft_examples(RECORDS, grouped=True)
    train, heldout, how = sft.hold_out(games, 2)
    assert how == "games" and len(heldout) == 2 and len(train) == 2  # the last game's two rows
    m = sft.run_sft(tiny_llama, train, tmp_path / "actor", max_steps=4, lr=1e-2, heldout=heldout, base_model="tiny")
    effect = m["effect"]
    assert effect["heldout_rows"] == 2 and effect["differs"] is True and effect["nll_trained"] != effect["nll_base"]
    assert len(effect["greedy_base"]) == len(effect["greedy_trained"]) == 2 and m["base_model"] == "tiny"
    err = capsys.readouterr().err
    assert [f"SFT step {i}/4" in err for i in range(1, 5)] == [True] * 4
    assert "SFT effect: the trained actor differs" in err
    none = sft.measure_effect(None, None, [])
    assert none["differs"] is None and "not measured" in sft.effect_line(none)
    same = {"heldout_rows": 3, "nll_base": 1.0, "nll_trained": 1.0, "greedy_changed": 0, "greedy_match_base": 0,
            "greedy_match_trained": 0, "differs": False}
    assert "does NOT measurably differ" in sft.effect_line(same)


def test_sft_rows_per_game_and_hold_out():
    assert sft.spaced(list(range(10)), 3) == [0, 4, 9] and sft.spaced([1, 2], 5) == [1, 2]
    assert sft.spaced([1, 2, 3], 1) == [2]
    train, held, how = sft.hold_out([[1, 2, 3, 4, 5]], 4)
    assert (train, held, how) == ([1, 2, 3], [4, 5], "rows of a trained game")
    assert sft.hold_out([[1, 2]], 0) == ([1, 2], [], "none")


def test_two_wins_of_one_game_are_one_game_for_hold_out():
    """Reflexion replays a won game almost step for step: its two wins must not pass for two games, or the
    held-out "game" would be a copy of a trained one."""
    recs = [_rec("a", 0, True, "x"), _rec("a", 1, True, "y")]
    games = sft.sft_examples(recs, grouped=True)
    assert len(games) == 1 and len(games[0]) == 4
    assert sft.hold_out(games, 4)[2] == "rows of a trained game"
    two = sft.sft_examples([*recs, _rec("b", 0, True, "z")], grouped=True)
    assert [len(g) for g in two] == [4, 2] and sft.hold_out(two, 2)[2] == "games"


@pytest.mark.slow
def test_sft_adds_no_eos_and_the_tuned_actor_rolls_out_several_steps(tiny_llama, tmp_path):
    """The fine-tuned actor is MUSE's world model: its look-ahead rollouts must go on past one action.
    With trl's EOS after every completion they stopped after one (SmolLM2: EOS was 56-81% of the loss)."""
    from llm_side.agents import prompting
    from llm_side.agents.muse import ROLLOUT_STOP
    from llm_side.backends.local import load_hf_dir

    rows = sft.sft_examples(RECORDS)
    _, tok = sft.load_base(tiny_llama)
    encoded = sft.tokenize_rows(rows, tok)
    assert all(tok.eos_token_id not in e["input_ids"] for e in encoded)
    assert all(tok.decode([i for i, m in zip(e["input_ids"], e["completion_mask"], strict=True) if m]).endswith(
        "\n>") for e in encoded)
    m = sft.run_sft(tiny_llama, rows, tmp_path / "actor", max_steps=120, lr=1e-2)
    assert m["rows_trained"] == m["rows"] == len(rows) and m["rows_left_out"] == 0

    def rollout_pairs(folder):
        actor = load_hf_dir(str(folder / "merged"))
        text = actor.complete(rows[0]["prompt"], n=1, temperature=0.0, max_tokens=40, stop=[ROLLOUT_STOP])[0]
        return len(prompting.parse_rollout(text, max_pairs=100)), text

    pairs, text = rollout_pairs(tmp_path / "actor")
    assert pairs > 1, f"rollout ended after {pairs} action/observation pair(s): {text!r}"
    # the old rows (' action\n' + EOS, as trl appended it) teach the world model to stop after one action
    old = [{"prompt": r["prompt"], "completion": r["completion"].split("\n")[0] + "\n" + tok.eos_token} for r in rows]
    sft.run_sft(tiny_llama, old, tmp_path / "eos", max_steps=120, lr=1e-2)
    assert rollout_pairs(tmp_path / "eos")[0] == 1


def test_sft_rows_too_long_for_the_window_lose_the_transcript_head_not_the_completion():
    recs = [dict(RECORDS[1], actions=[f"step {i}" for i in range(30)] + ["win"],
                 observations=[f"observation number {i} of a long episode" for i in range(31)])]
    full = sft.sft_examples(recs)
    fitted = sft.sft_examples(recs, fits=lambda text: len(text) <= 600)
    assert len(fitted) == len(full) == 31
    assert [r["completion"] for r in fitted] == [r["completion"] for r in full]
    assert all(len(r["prompt"] + r["completion"]) <= 600 for r in fitted[5:])
    assert "earlier steps omitted" in fitted[-1]["prompt"] and "Room." in fitted[-1]["prompt"]


def test_dpo_pairs_too_long_lose_the_transcript_head():
    steps = "".join(f"> go to place {i}\nNothing happens.\n" for i in range(20))
    prompt = f"Instruction. Here are two examples:\n\nEXAMPLES\n\nYou are in a room.\n{steps}STATUS: FAIL\n\nNew plan:"
    pair = {"prompt": prompt, "chosen": " go left", "rejected": " go right"}
    kept, left_out = dpo.fit_pairs([pair], len, window=len(prompt) - 50)
    assert left_out == 0 and len(kept) == 1
    short = kept[0]["prompt"]
    assert len(short) + len(" go right") + 1 <= len(prompt) - 50
    assert "> go to place 19" in short and "> go to place 0\n" not in short and short.endswith("New plan:")
    _, none_fit = dpo.fit_pairs([pair], len, window=20)
    assert none_fit == 1


@pytest.mark.slow
def test_dpo_real_lora_steps(tiny_llama, tmp_path):
    pairs = dpo.preference_pairs(RECORDS)
    long = [dict(p, prompt="x " * 900 + p["prompt"]) for p in pairs]  # past trl's old 1024-token default
    m = dpo.run_dpo(tiny_llama, pairs + long, tmp_path / "rx", max_steps=3, lr=5e-3)
    assert m["steps"] == 3 and math.isfinite(m["final_loss"]) and m["lora_delta"] > 0
    assert m["pairs_trained"] == m["pairs"] == 2 and m["max_length"] > 1024
    assert (tmp_path / "rx" / "merged" / "config.json").is_file()


def test_pipeline_train_sa_stage_is_resumable(tmp_path, monkeypatch):
    from test_muse_agent import BowEmbedder

    for r in RECORDS:
        append_jsonl(tmp_path / "collect" / "episodes.jsonl", r)
    cfg = pipe.PipelineConfig(out=tmp_path, sa_epochs=5)
    first = pipe.stage_train_sa(cfg, embedder=BowEmbedder())
    assert first["examples"] == 6
    monkeypatch.setattr("llm_side.training.self_awareness.train_msa",
                        lambda *a, **k: pytest.fail("a finished stage must not retrain"))
    assert pipe.stage_train_sa(cfg, embedder=BowEmbedder())["examples"] == 6
    with pytest.raises(pipe.UsageError, match="trained with its task input.*drop --sa-without-task"):
        pipe.stage_train_sa(pipe.PipelineConfig(out=tmp_path, sa_epochs=5, sa_task_input=False), BowEmbedder())
    with pytest.raises(ValueError, match="unknown pipeline stage"):
        pipe.run_stage(cfg, "nope")
    with pytest.raises(FileNotFoundError, match="--stage collect"):
        pipe.stage_sft(pipe.PipelineConfig(out=tmp_path / "empty"))


def test_pipeline_errors_are_one_line(tmp_path, capsys):
    """No collected episodes, or nothing left to train: one line on stderr, exit 2, no traceback."""
    assert pipe.main(["--stage", "sft", "--out", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("muse-llm alfworld-pipeline: error:") and "--stage collect" in err[0]
    for r in RECORDS:
        append_jsonl(tmp_path / "only_fail" / "collect" / "episodes.jsonl", dict(r, success=False))
    # no preference pair: DPO is skipped (said on stderr and in its metrics), deploy then reflects with the base
    assert pipe.main(["--stage", "dpo", "--out", str(tmp_path / "only_fail"), "--base", str(tmp_path)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("DPO: skipped, no DPO pair")
    metrics = json.loads((tmp_path / "only_fail" / "reflection_dpo" / "metrics.json").read_text())
    assert metrics["skipped"] and metrics["pairs"] == 0
    assert not (tmp_path / "only_fail" / "reflection_dpo" / "merged").exists()
    with pytest.raises(ValueError, match="no DPO preference pairs"):
        dpo.run_dpo(tmp_path, [], tmp_path / "rx0")


def test_test_metrics_use_only_test_episodes():
    recs = [dict(_rec("a", e, e >= 2), steps=10, chunk_competence=[0.9 if e >= 2 else 0.1]) for e in range(4)]
    m = pipe.test_metrics(recs, first_test=2)
    assert m["episodes"] == 2 and m["success_rate"] == 1.0 and m["time_to_success_penalty100"] == 10
    m_all = pipe.test_metrics(recs, first_test=0)
    assert m_all["sa_auroc"] == 1.0 and m_all["sa_accuracy"] == 1.0 and m_all["time_to_success_penalty100"] == 55


def test_expert_games_share_and_pipeline_flags_are_checked(capsys):
    ids = [f"g{i}" for i in range(10)]
    picked = pipe.expert_games(ids, 0.25, seed=0)
    assert len(picked) == 3 and picked == [t for t in ids if t in picked] == pipe.expert_games(ids, 0.25, seed=0)
    assert pipe.expert_games(ids, 0.0, 0) == [] and pipe.expert_games(ids[:1], 0.01, 0) == ["g0"]
    assert pipe.expert_games(ids, 1.0, 0) == ids
    for flag, value in (("--expert-share", "1.5"), ("--sft-steps", "0"), ("--lora-rank", "0"), ("--sft-lr", "0")):
        assert pipe.main(["--stage", "sft", "--out", "x", flag, value]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and flag in err[0], err


def test_train_games_are_drawn_across_the_task_types_not_the_first_of_the_split(monkeypatch, capsys):
    """A split is sorted by game folder, so `--limit 10` collects on ten look_at games; `--train-games 10`
    draws round-robin over the six types with the seed, in the split's order, and the collection runs on them."""
    from llm_side.envs.alfworld_data import REACT_PREFIXES, react_family

    ids = [f"valid_seen/{prefix}-X-{i}/trial_T{i}" for prefix in sorted(REACT_PREFIXES) for i in range(5)]
    picked = pipe.games_across_types(ids, 10, seed=0)
    types = [react_family(t) for t in picked]
    assert len(picked) == 10 and len(set(types)) == 6 and max(types.count(t) for t in set(types)) == 2
    assert picked == [t for t in ids if t in picked] == pipe.games_across_types(ids, 10, seed=0)
    assert pipe.games_across_types(ids, 10, seed=1) != picked and pipe.games_across_types(ids, 99, 0) == ids

    class Split:
        def task_ids(self, split=None):
            return ids

        def close(self):
            pass

    ran = []
    monkeypatch.setattr(pipe, "_env", lambda cfg, expert=False: Split())
    monkeypatch.setattr(pipe, "execute", lambda spec, out, **kw: ran.append(spec) or {"episodes": 0})
    monkeypatch.setattr(pipe, "collect_expert", lambda cfg, task_ids: None)
    pipe.stage_collect(pipe.PipelineConfig(out=Path("unused"), model="smollm2", train_games=6, limit=2))
    (spec,) = ran
    assert sorted(react_family(t) for t in spec.tasks) == sorted(set(REACT_PREFIXES.values()))
    assert spec.limit is None  # --limit still bounds the deploy split, not a drawn collection
    assert pipe.main(["--stage", "collect", "--out", "x", "--train-games", "0"]) == 2
    assert "--train-games must be >= 1" in capsys.readouterr().err


def test_staging_removes_the_temp_folder_of_a_killed_stage_only(tmp_path):
    """A training stage killed mid-way (the OOM killer took a 1.5B SFT) leaves its temp folder; the next run
    removes it once its process is gone, and leaves a live process's folder alone."""
    import os

    dead = tmp_path / f".actor.tmp-{2**22 + 7}-abc"
    live = tmp_path / f".actor.tmp-{os.getppid()}-def"
    other = tmp_path / ".actor.tmp-foreign"
    for d in (dead, live, other):
        (d / "trainer").mkdir(parents=True)
    with sft.staging(tmp_path / "actor") as tmp:
        (tmp / "done").write_text("1")
    assert (tmp_path / "actor" / "done").is_file()
    assert not dead.exists() and live.exists() and other.exists()


def test_greedy_actions_get_room_for_the_whole_recorded_line():
    """A recorded `think:` line longer than the fixed minimum gets the tokens to be written out in full (it
    was cut at 24 and counted a mismatch); a short action keeps the minimum."""
    import torch

    class Tok:
        pad_token_id = 0

        def __call__(self, text, return_tensors=None, add_special_tokens=False):
            ids = [1 + i for i, _ in enumerate(text.split())]
            return type("Enc", (), {"input_ids": torch.tensor([ids]) if return_tensors else ids})()

        def decode(self, ids, skip_special_tokens=True):
            return " ".join("w" for _ in ids) + "\n> next"

    class Model:
        budgets: list[int] = []

        def generate(self, input_ids, max_new_tokens, **_):
            self.budgets.append(max_new_tokens)
            return torch.cat([input_ids, torch.ones(1, max_new_tokens, dtype=torch.long)], dim=1)

    long_line = "think: " + " ".join(["w"] * 40)
    rows = [{"prompt": "room\n>", "completion": f" {long_line}\n"}, {"prompt": "room\n>", "completion": " look\n"}]
    model = Model()
    acts = sft.greedy_actions(model, Tok(), rows)
    assert model.budgets == [41 + sft.GREEDY_MARGIN_TOKENS, sft.GREEDY_MIN_TOKENS]
    assert len(acts[0].split()) == 41 + sft.GREEDY_MARGIN_TOKENS
    assert sft.greedy_actions(model, Tok(), rows[:1], max_new_tokens=5) == ["w w w w w"]
