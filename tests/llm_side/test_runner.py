"""run_eval on the fake env: records, memory across episodes, crashes, agent errors, resume."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from harness_fakes import FakeEnv, MemoryAgent  # noqa: E402

from llm_side.harness.runner import run_eval  # noqa: E402
from muse_common.files import read_jsonl  # noqa: E402


def _run(env, agent, out, tasks, episodes=3, **kw):
    return run_eval(
        env,
        agent,
        env_name="fake",
        agent_name="memory",
        task_ids=tasks,
        episodes=episodes,
        max_steps=kw.pop("max_steps", None),
        out_dir=out,
        progress=False,
        **kw,
    )


def test_records_memory_and_summary(tmp_path):
    env, agent = FakeEnv(n_tasks=2), MemoryAgent()
    summary = _run(env, agent, tmp_path, env.task_ids())
    rows = list(read_jsonl(tmp_path / "episodes.jsonl"))
    assert [(r["task"], r["episode"]) for r in rows] == [(t, e) for t in ("easy-0", "easy-1") for e in range(3)]
    first, second = rows[0], rows[1]
    # Episode 0 fails at the default 5-step limit; memory carries the failure to episode 1, which wins.
    assert first["success"] is False and first["steps"] == env.default_max_steps
    assert first["actions"] == ["look"] * 5 and first["competence"] == [0.1] * 5
    assert second["success"] is True and second["steps"] == 1 and second["score"] == 100.0
    assert second["memory"] == {"failures": [0]} and second["n_failures_seen"] == 1
    assert second["step_info"] == [{"why": "remembered"}]
    # A new task starts with fresh memory.
    assert rows[3]["success"] is False and rows[3]["memory"] == {"failures": [0]}
    assert summary["success_rate"] == pytest.approx(4 / 6)
    assert summary["episodes"] == 6 and summary["complete"] is True
    assert summary["per_task"]["easy-0"]["successes"] == 2
    assert summary["mean_steps"] == pytest.approx((5 + 1 + 1) * 2 / 6)
    assert summary["time_to_success"] == pytest.approx((100 + 1 + 1) / 3)
    on_disk = (tmp_path / "summary.json").read_text()
    assert '"success_rate"' in on_disk and '"per_task"' in on_disk
    assert env.resets[1] == ("easy-0", 1)  # seed differs per episode


def test_each_record_says_where_and_when_it_was_made_and_an_agent_cannot_overwrite_it(tmp_path):
    """A run folder is resumed across sessions and machines: every line names its processor, its finish time
    and the provenance it was given (the server); an agent's extras of those names go under `extras`."""
    from datetime import datetime

    from muse_common.machine import cpu_model

    env, agent = FakeEnv(n_tasks=1), MemoryAgent()
    agent.episode_extras = lambda: {"server": "forged", "cpu_model": "forged", "finished": "never"}
    _run(env, agent, tmp_path, env.task_ids(), episodes=2, provenance={"server": {"engine": "llama.cpp"}})
    rows = list(read_jsonl(tmp_path / "episodes.jsonl"))
    assert len(rows) == 2
    for row in rows:
        assert row["cpu_model"] == cpu_model() and row["server"] == {"engine": "llama.cpp"}
        assert datetime.strptime(row["finished"], "%Y-%m-%dT%H:%M:%SZ").year >= 2026
        assert row["extras"] == {"server": "forged", "cpu_model": "forged", "finished": "never"}


def test_env_crash_and_agent_error_are_recorded_not_raised(tmp_path):
    env, agent = FakeEnv(n_tasks=1, kinds="crash+bad+easy"), MemoryAgent()
    summary = _run(env, agent, tmp_path, env.task_ids(), episodes=1)
    rows = {r["task"]: r for r in read_jsonl(tmp_path / "episodes.jsonl")}
    assert rows["crash-0"]["success"] is False and "EnvCrashed" in rows["crash-0"]["reason"]
    assert env.restarts == 1
    assert "agent error" in rows["bad-0"]["reason"] and "could not parse" in rows["bad-0"]["reason"]
    assert rows["easy-0"]["reason"] is None
    assert summary["failed_with_reason"] == 2 and summary["episodes"] == 3


class _Interrupt(Exception):
    pass


class _DyingAgent(MemoryAgent):
    """Raises a BaseException-like interrupt (not caught by the runner) after `n` episodes."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def end_episode(self, outcome):
        super().end_episode(outcome)
        self.n -= 1
        if self.n < 0:
            raise KeyboardInterrupt


def test_resume_after_interrupt_runs_each_pair_once_and_restores_memory(tmp_path):
    env = FakeEnv(n_tasks=2)
    with pytest.raises(KeyboardInterrupt):
        _run(env, _DyingAgent(n=2), tmp_path, env.task_ids())
    assert len(list(read_jsonl(tmp_path / "episodes.jsonl"))) == 2  # the interrupted third is not written
    # Simulate a kill mid-write: a torn last line.
    with open(tmp_path / "episodes.jsonl", "a") as f:
        f.write('{"env": "fake", "task": "easy-0", "epi')
    agent = MemoryAgent()
    summary = _run(env, agent, tmp_path, env.task_ids())
    rows = list(read_jsonl(tmp_path / "episodes.jsonl"))
    pairs = [(r["task"], r["episode"]) for r in rows]
    assert sorted(pairs) == sorted({(t, e) for t in ("easy-0", "easy-1") for e in range(3)})
    assert len(pairs) == len(set(pairs)) == 6
    assert agent.loaded[0] == {"failures": [0]}  # restored from the last finished record of easy-0
    assert rows[2]["success"] is True  # episode 2 of easy-0 used the restored memory
    assert summary["episodes"] == 6
    # A third run has nothing left to do and changes nothing.
    before = (tmp_path / "episodes.jsonl").read_text()
    _run(env, MemoryAgent(), tmp_path, env.task_ids())
    assert (tmp_path / "episodes.jsonl").read_text() == before


def test_resume_refuses_a_malformed_record_before_running_anything(tmp_path):
    """A complete line that is not an episode record (not the torn tail of a kill) stops the resume in one
    line naming the file and line: its episode is neither counted nor silently redone, nothing is appended."""
    from llm_side.harness.records import RecordError

    env = FakeEnv(n_tasks=1)
    _run(env, MemoryAgent(), tmp_path, env.task_ids(), episodes=2)
    path = tmp_path / "episodes.jsonl"
    first, second = path.read_text().splitlines()
    path.write_text(first + "\n" + second.replace('"steps": ', '"steps": -') + "\n")
    before = path.read_bytes()
    with pytest.raises(RecordError, match=r"episodes.jsonl line 2 is not an episode record \('steps' is -"):
        _run(env, MemoryAgent(), tmp_path, env.task_ids(), episodes=3)
    assert path.read_bytes() == before


def test_refuses_to_mix_runs_and_bad_arguments(tmp_path):
    env = FakeEnv(n_tasks=1)
    _run(env, MemoryAgent(), tmp_path, env.task_ids(), episodes=1)
    with pytest.raises(ValueError, match="different --out"):
        run_eval(
            env,
            MemoryAgent(),
            env_name="fake",
            agent_name="other",
            task_ids=["easy-0"],
            episodes=1,
            max_steps=3,
            out_dir=tmp_path,
            progress=False,
        )
    with pytest.raises(ValueError, match="episodes must be"):
        _run(env, MemoryAgent(), tmp_path / "b", ["easy-0"], episodes=0)
    with pytest.raises(ValueError, match="no tasks"):
        _run(env, MemoryAgent(), tmp_path / "c", [])


def test_progress_bar_shows_done_success_and_eta(tmp_path, capsys):
    env = FakeEnv(n_tasks=1)
    run_eval(
        env,
        MemoryAgent(),
        env_name="fake",
        agent_name="memory",
        task_ids=env.task_ids(),
        episodes=2,
        max_steps=2,
        out_dir=tmp_path,
        progress=True,
    )
    err = capsys.readouterr().err
    assert "2/2" in err and "success 1/2 (50%)" in err and "<00:00" in err  # done/total, success so far, ETA
    assert "success 0/0 (0%), step 1/2" in err and "step 2/2" in err  # the episode under way shows its step


class _BackendDown(RuntimeError):
    fatal = True


class _NoServerAgent(MemoryAgent):
    def act(self, observation, admissible_actions):
        raise _BackendDown("OpenAI-compatible server at http://127.0.0.1:1/v1 failed after 4 attempts")


def test_backend_down_stops_the_run_without_recording_failures(tmp_path):
    env = FakeEnv(n_tasks=2)
    with pytest.raises(_BackendDown, match="127.0.0.1:1"):
        _run(env, _NoServerAgent(), tmp_path, env.task_ids())
    assert list(read_jsonl(tmp_path / "episodes.jsonl")) == []  # nothing to skip on resume: it is redone


class _ObservingAgent(MemoryAgent):
    """Sees every StepResult (RefRea's per-step reward) and stops a task once it is solved."""

    stop_after_success = True

    def __init__(self) -> None:
        super().__init__()
        self.rewards: list[float] = []

    def observe(self, result) -> None:
        self.rewards.append(result.reward)


def test_observe_hook_and_trials_until_success(tmp_path):
    env, agent = FakeEnv(n_tasks=1), _ObservingAgent()
    summary = _run(env, agent, tmp_path, env.task_ids(), episodes=4)
    rows = list(read_jsonl(tmp_path / "episodes.jsonl"))
    # Episode 0 fails (5 looks), episode 1 wins; episodes 2-3 are not played once the task is solved.
    assert [(r["episode"], r["success"]) for r in rows] == [(0, False), (1, True)]
    assert agent.rewards == [0.0] * 5 + [1.0]
    assert summary["successes"] == 1


class _WorldKnowledgeAgent(MemoryAgent):
    cross_task_memory = True


def test_cross_task_memory_is_restored_for_a_new_task_on_resume(tmp_path):
    env = FakeEnv(n_tasks=2)
    _run(env, _WorldKnowledgeAgent(), tmp_path, ["easy-0"], episodes=1)
    resumed = _WorldKnowledgeAgent()
    _run(env, resumed, tmp_path, ["easy-0", "easy-1"], episodes=1)
    # easy-1 is new, but a world-knowledge agent starts it from the latest memory of any task.
    assert resumed.loaded[-1] == {"failures": [0]}
    plain = MemoryAgent()
    _run(FakeEnv(n_tasks=2), plain, tmp_path / "plain", ["easy-0", "easy-1"], episodes=1)
    assert plain.loaded[-1] == {}
