"""The ALFWorld env on the real offline games: splits and ids, reset/step contract, think and empty
actions, the expert wins, load failures raise EnvCrashed, missing data names the fix; and a run
interrupted mid-way resumes without losing or duplicating episodes. Also holds the fixtures the
other ALFWorld agent tests import."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import sys
from pathlib import Path

import pytest

from llm_side.envs import alfworld_data as awd
from llm_side.envs.alfworld import AlfworldEnv, clean_observation, make_env, report_tables, task_text
from llm_side.harness.contracts import Decision, EnvCrashed, TextEnv

sys.path.insert(0, str(Path(__file__).parent))
from harness_fakes import NoMemoryAgent  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# -- helpers shared with test_react / test_reflexion / test_muse_agent / test_self_awareness ----------

@functools.lru_cache(maxsize=1)
def shared_env():
    """One env per test process: the test modules that import these fixtures share its game cache.
    No few-shot examples (shots=0): a 1400-token ReAct prompt costs ~30 s per call on a busy 2-core CPU."""
    env = make_env(expert="true", shots="0")
    atexit.register(env.close)
    return env


def first_task() -> str:
    return awd.task_ids("eval_out_of_distribution")[0]


def smollm2():
    """The real offline test model (loaded once per process by the backend)."""
    from llm_side.backends import load_llm

    return load_llm("smollm2")


@pytest.fixture(name="alfworld_env")
def _alfworld_env():
    return shared_env()


@pytest.fixture(name="first_task")
def _first_task():
    return first_task()


class ExpertAgent(NoMemoryAgent):
    """Plays the env's hand-coded expert plan: real winning episodes for M_sa tests."""

    name = "expert"

    def begin_episode(self, obs, *, task_id, episode, env):
        self.env = env

    def act(self, observation, admissible_actions):
        return Decision(self.env.expert_action() or "look")


class LookAgent(ExpertAgent):
    """Never does anything useful: real failing episodes."""

    name = "look"

    def act(self, observation, admissible_actions):
        return Decision("look")


# -- pure helpers -------------------------------------------------------------------------------------

def test_observation_helpers():
    raw = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.\n\n"
           "Your task is to: put a mug on desk.")
    text = clean_observation(raw)
    assert text.startswith("You are in") and task_text(text) == "put a mug on desk"
    assert clean_observation("On the desk 1, you see a mug 1.") == "On the desk 1, you see a mug 1."
    arrive = "You arrive at loc 12. On the desk 1, you see a mug 1."
    assert clean_observation(arrive) == "On the desk 1, you see a mug 1."


def test_splits_ids_and_prompt_material():
    ids = {s: awd.task_ids(s) for s in awd.SPLITS}
    assert {s: len(v) for s, v in ids.items()} == {"eval_in_distribution": 140, "eval_out_of_distribution": 134,
                                                   "train": 200}
    assert ids["eval_out_of_distribution"] == awd.task_ids("valid_unseen") == sorted(ids["eval_out_of_distribution"])
    assert all(t.startswith("valid_seen/") and t.count("/") == 2 for t in ids["eval_in_distribution"])
    families = {awd.react_family(t) for t in ids["eval_out_of_distribution"]}
    assert families == {"put", "clean", "heat", "cool", "examine", "puttwo"}
    ex = awd.react_examples(ids["eval_out_of_distribution"][0])
    assert ex.count("Your task is to:") == 2 and "> think:" in ex
    one = awd.react_examples(ids["eval_out_of_distribution"][0], shots=1)
    assert one.count("Your task is to:") == 1 and ex.endswith(one)
    assert AlfworldEnv(shots=0).react_examples(ids["eval_out_of_distribution"][0]) == ""
    from llm_side.agents.base import few_shot_head
    head = few_shot_head(AlfworldEnv(shots=1), ids["eval_out_of_distribution"][0])
    assert head.startswith("Interact with a household to solve a task.") and head.count("Your task is to:") == 1
    assert "STATUS: FAIL" in awd.reflexion_examples()
    with pytest.raises(ValueError, match="unknown ALFWorld split"):
        awd.task_ids("nope")


def test_tasks_of_any_split_are_played_without_setting_the_split():
    """`--tasks valid_seen/...` names its split in the id: it is accepted with the env's default split
    (eval_out_of_distribution), and an unknown id is one line naming it and how to list the ids."""
    from llm_side.run_spec import UsageError, select_tasks

    env = AlfworldEnv()
    seen, unseen = awd.task_ids("eval_in_distribution")[3], awd.task_ids("eval_out_of_distribution")[0]
    assert select_tasks(env, None, f"{seen},{unseen}", None) == [seen, unseen]
    assert awd.game_file(seen).is_file()
    bad = seen.replace("valid_seen", "valid_unseen")
    with pytest.raises(UsageError, match=r"task id\(s\) 'valid_unseen/.*muse-llm tasks --env alfworld"):
        select_tasks(env, None, [seen, bad], None)
    with pytest.raises(UsageError, match="more than once"):
        select_tasks(env, None, [seen, seen], None)


def test_missing_data_error_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="ALFWORLD_DATA"):
        make_env()
    monkeypatch.delenv("ALFWORLD_DATA")
    with pytest.raises(FileNotFoundError, match="ALFWORLD_DATA.*alfworld_json_2.1.1_eval.tgz.*MUSE_SHARED_DATA"):
        awd.unpack_archive(tmp_path / "alfworld_json_2.1.1_eval.tgz", tmp_path / "cache")
    with pytest.raises(ValueError, match="unknown alfworld option"):
        make_env(bogus=1)


def test_report_table_by_task_type():
    recs = [{"env": "alfworld", "agent": "react", "task": t, "success": s} for t, s in
            (("valid_unseen/pick_heat_then_place_in_recep-Egg-None-X-1/trial_1", True),
             ("valid_unseen/pick_heat_then_place_in_recep-Egg-None-X-2/trial_1", False))]
    ((title, table),) = report_tables(recs)
    assert "task type" in title and "| react | 50% (2) |" in table


# -- real games ------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_reset_step_think_invalid_and_expert_wins(alfworld_env, first_task):
    env: TextEnv = alfworld_env
    assert isinstance(env, TextEnv) and env.default_max_steps == 50
    obs = env.reset(first_task)
    assert obs.text.startswith("You are in the middle of a room") and obs.task and obs.task in obs.text
    assert obs.admissible_actions and "look" in obs.admissible_actions
    r = env.step("think: where is the lamp?")
    assert (r.observation, r.done, r.won) == ("OK.", False, False)
    r = env.step("")
    assert r.observation == "Nothing happens." and r.info["invalid"]
    r = env.step("fly to the moon")
    assert r.observation == "Nothing happens." and not r.done
    obs = env.reset(first_task)  # cached game, fresh episode
    for _ in range(40):
        r = env.step(env.expert_action())
        if r.done:
            break
    assert r.won and r.done


@pytest.mark.slow
def test_fifty_step_limit(alfworld_env, first_task):
    alfworld_env.reset(first_task)
    results = [alfworld_env.step("think: waiting") for _ in range(50)]
    assert not any(r.done for r in results[:-1]) and results[-1].done and not results[-1].won
    with pytest.raises(RuntimeError, match="reset"):
        alfworld_env.step("look")


@pytest.mark.slow
def test_broken_game_raises_env_crashed(tmp_path, first_task):
    src = awd.data_root()
    shutil.copytree(src / "logic", tmp_path / "logic")
    game_dir = tmp_path / "json_2.1.1" / first_task
    shutil.copytree(src / "json_2.1.1" / first_task, game_dir)
    game = json.loads((game_dir / "game.tw-pddl").read_text())
    game["pddl_problem"] = "(define (problem broken"
    (game_dir / "game.tw-pddl").write_text(json.dumps(game))
    env = AlfworldEnv(data=tmp_path)
    assert env.task_ids("valid_unseen") == [first_task]
    with pytest.raises(EnvCrashed, match="failed to load"):
        env.reset(first_task)


@pytest.mark.slow
def test_interrupted_run_resumes_without_loss_or_duplicates(tmp_path, alfworld_env, first_task):
    from llm_side.agents.react import ReActAgent
    from llm_side.backends.scripted import ScriptedLLM
    from llm_side.harness.runner import run_eval
    from muse_common.files import read_jsonl

    class Interrupt(BaseException):
        pass

    def reply(prompt, i):
        if i == 3:  # mid-way through the second episode: a kill
            raise Interrupt
        return " look"

    kw = dict(env_name="alfworld", agent_name="react", task_ids=[first_task], episodes=3, max_steps=2,
              out_dir=tmp_path, progress=False)
    with pytest.raises(Interrupt):
        run_eval(alfworld_env, ReActAgent(ScriptedLLM(reply)), **kw)
    assert [r["episode"] for r in read_jsonl(tmp_path / "episodes.jsonl")] == [0]
    run_eval(alfworld_env, ReActAgent(ScriptedLLM([" look"])), **kw)
    recs = list(read_jsonl(tmp_path / "episodes.jsonl"))
    assert [r["episode"] for r in recs] == [0, 1, 2]
    assert all(r["actions"] == ["look", "look"] for r in recs)
