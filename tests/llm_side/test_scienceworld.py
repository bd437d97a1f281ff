"""ScienceWorld env: task table and ids, Table 1 report, and the real JVM (episodes, valid actions,
crash and hang recovery through the runner). One JVM is shared by the module."""

from __future__ import annotations

import os
import signal
import statistics
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_side.envs import scienceworld_tasks as tasks
from llm_side.harness.contracts import Decision, EnvCrashed

sys.path.insert(0, str(Path(__file__).parent))
from harness_fakes import NoMemoryAgent  # noqa: E402

# Gold path of train variation 0 of 4-1 (find-living-thing), from the simulator's own gold-path generator.
GOLD_4_1_VAR0 = ["open door to kitchen", "go to kitchen", "open door to outside", "go to outside", "look around",
                 "focus on dove", "pick up dove", "open door to kitchen", "go to kitchen",
                 "move egg dove egg in inventory to red box"]


# ---- pure parts ----------------------------------------------------------------------------------------
def test_task_table_matches_paper_table1():
    assert len(tasks.TASK_TYPES) == 30 and len(tasks.BY_NAME) == 30
    by_class = {c: [t.oracle_length for t in tasks.TASK_TYPES if t.length_class == c] for c in "SML"}
    assert [len(by_class[c]) for c in "SML"] == [10, 8, 12]
    # Table 1's 'Length' column of the Short / Medium / Long / Overall rows
    means = [statistics.fmean(by_class[c]) for c in "SML"] + [statistics.fmean(t.oracle_length
                                                                          for t in tasks.TASK_TYPES)]
    assert means == pytest.approx([11.76, 28.58, 94.3, 49.26], abs=0.01)  # the paper rounds


@pytest.mark.parametrize("spec,expected", [
    ("4-1", ("4-1", None)), ("find-living-thing/var3", ("4-1", 3)), ("10-2/var360", ("10-2", 360)),
    ("task-1-boil", ("1-1", None)), ("mendellian-genetics-known-plant", ("10-1", None)), ("BOIL/var0", ("1-1", 0)),
])
def test_parse_task_id_accepts_paper_ids_and_names(spec, expected):
    tt, var = tasks.parse_task_id(spec)
    assert (tt.paper_id, var) == expected


@pytest.mark.parametrize("spec", ["11-1", "boil/3", "boil/varX", "", "4-1/var3/var4"])
def test_bad_task_ids_say_how_to_fix(spec):
    with pytest.raises(ValueError, match="task"):
        tasks.parse_task_id(spec)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=40))
def test_parse_task_id_only_raises_value_error(text):
    try:
        tt, var = tasks.parse_task_id(text)
    except ValueError:
        return
    assert tt in tasks.TASK_TYPES and (var is None or var >= 0)


def test_react_examples_cover_every_topic():
    for tt in tasks.TASK_TYPES:
        ex = tasks.react_examples(tt)
        assert "> think:" in ex and "Your task is" in ex and "focus on OBJ" in ex


def test_report_tables_follow_table1_layout():
    from llm_side.envs.scienceworld import report_tables, table1

    recs = [
        {"env": "scienceworld", "agent": "refrea", "task": "4-1/var225", "score": 50.0, "steps": 10},
        {"env": "scienceworld", "agent": "refrea", "task": "4-1/var226", "score": 100.0, "steps": 6},
        {"env": "scienceworld", "agent": "refrea", "task": "2-1/var0", "score": 30.0, "steps": 20},
        {"env": "scienceworld", "agent": "refrea", "task": "boil/var21", "score": 0.0, "steps": 30},
        {"env": "scienceworld", "agent": "cot", "task": "4-1/var225", "score": 10.0, "steps": 4},
        {"env": "alfworld", "agent": "cot", "task": "x", "score": None, "steps": 3},
    ]
    header, rows = table1(recs)
    assert header == ["Task Type", "Length", "refrea", "cot"]
    table = {r[0]: r[1:] for r in rows}
    assert table["1-1(L)"] == ["107.7", "0.00", "-"] and table["4-1(S)"] == ["14.6", "75.00", "10.00"]
    assert table["Short"][1:] == ["75.00", "10.00"] and table["Medium"][1:] == ["30.00", "-"]
    assert table["Long"][1:] == ["0.00", "-"] and table["Overall"][1:] == ["35.00", "10.00"]
    assert table["Steps/episode"][1:] == ["16.5", "4.0"]
    ((title, md),) = report_tables(recs)
    assert "Table 1" in title and md.splitlines()[0].startswith("| Task Type | Length | refrea | cot |")
    assert "averages EVERY trial record" in title  # failed trials before a success count too
    assert report_tables([]) == []


# ---- the real simulator ----------------------------------------------------------------------------------
def _java_children() -> list[int]:
    """Java processes whose parent is this test process (how an operator would find the JVM)."""
    me, out = os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and b"java" in cmd:
            out.append(int(pid))
    return out


def test_make_env_rejects_bad_options():
    from llm_side.envs.scienceworld import make_env

    with pytest.raises(ValueError, match="unknown scienceworld option"):
        make_env(splt="dev")
    with pytest.raises(ValueError, match="split"):
        make_env(split="validation")


@pytest.mark.slow
def test_task_ids_and_expansion(sw_env):
    ids = sw_env.task_ids()
    assert len(ids) == 90 and ids[:3] == ["1-1/var21", "1-1/var22", "1-1/var23"]
    assert sw_env.variations("4-1", "test")[0] == 225 and len(sw_env.variations("4-1", "train")) == 150
    assert sw_env.expand_task_ids(["4-1", "find-living-thing/var3", "boil"]) == ["4-1/var225", "4-1/var3", "1-1/var21"]
    with pytest.raises(ValueError, match="variation 5000"):
        sw_env.reset("4-1/var5000")
    with pytest.raises(ValueError, match="has variations 0..299"):
        sw_env.expand_task_ids(["4-1/var5000"])


@pytest.mark.slow
def test_gold_path_wins_with_score_100_and_lazy_valid_actions(sw_env):
    obs = sw_env.reset("4-1/var0")
    assert obs.task.startswith("Your task is to find a(n) living thing") and "hallway" in obs.text
    assert obs.admissible_actions is None and obs.info["length_class"] == "S"
    valid = sw_env.admissible_actions()
    assert GOLD_4_1_VAR0[0] in valid and len(valid) > 50
    think = sw_env.step("think: the animals are outside")
    assert think.observation == "OK." and think.reward == 0.0
    assert sw_env.step("").observation.startswith("No known action") and not sw_env.step("fly to the moon").done
    rewards, result = [], None
    for action in GOLD_4_1_VAR0:
        result = sw_env.step(action)
        assert result.admissible_actions is None and sw_env.last_result is result
        rewards.append(result.reward)
    assert result.won and result.done and result.score == 100.0
    assert rewards[0] > 0 and sum(rewards) == 100


@pytest.mark.slow
def test_hung_jvm_times_out_as_env_crashed(sw_env):
    sw_env.reset("7-1/var0")
    pid = sw_env.jvm_pid
    sw_env.step_timeout_s = 2.0
    try:
        os.kill(pid, signal.SIGSTOP)
        for _ in range(50):  # the signal is delivered asynchronously
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T":
                break
            time.sleep(0.05)
        t0 = time.monotonic()
        with pytest.raises(EnvCrashed, match="hung"):
            sw_env.step("open door to kitchen")
        assert time.monotonic() - t0 < 10
    finally:
        sw_env.step_timeout_s = 60.0
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sw_env.restart()
    assert sw_env.reset("7-1/var0").info["task_type"] == "7-1"


class KillerAgent(NoMemoryAgent):
    """A test double that kills the JVM on its second action in the first task only."""

    name = "killer"

    def __init__(self):
        self.env, self.calls, self.task = None, 0, ""

    def begin_episode(self, obs, *, task_id, episode, env):
        self.env, self.calls, self.task = env, 0, task_id

    def act(self, observation, admissible_actions):
        self.calls += 1
        if self.calls == 2 and self.task.startswith("4-1"):
            (pid,) = _java_children()  # found as a child java process, as an operator would
            assert pid == self.env.jvm_pid
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.3)
        return Decision(action="open door to kitchen")


@pytest.mark.slow
def test_runner_records_crashed_episode_and_goes_on(sw_env, tmp_path):
    from llm_side.envs.scienceworld import report_tables
    from llm_side.harness.records import load_records
    from llm_side.harness.runner import run_eval

    summary = run_eval(sw_env, KillerAgent(), env_name="scienceworld", agent_name="killer",
                       task_ids=["4-1/var0", "7-1/var0"], episodes=1, max_steps=3, out_dir=tmp_path, progress=False)
    crashed, ok = load_records(tmp_path)
    assert summary["episodes"] == 2
    assert crashed["task"] == "4-1/var0" and not crashed["success"] and crashed["steps"] == 1
    assert "EnvCrashed" in crashed["reason"] and "ScienceWorld JVM" in crashed["reason"]
    assert ok["task"] == "7-1/var0" and ok["reason"] is None and ok["steps"] == 3
    assert "7-1(S)" in report_tables([crashed, ok])[0][1]
