"""Fault 7: an environment that crashes is restarted, the episode is recorded with the reason, and
the run continues. Injected into the real envs: a Minecraft world raising mid-episode, an ALFWorld
game that fails to load (corrupted game file), and a Meta-World env raising during `adapt`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fault_helpers import JAX_CACHE, jsonl_lines
from scripted_agents import make_agent

from llm_side.harness.runner import run_eval


def test_minecraft_world_crash_mid_episode_recorded_and_run_continues(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_side.envs.minecraft import make_env
    from llm_side.envs.minecraft.world import World

    real_act, calls = World.act, {"n": 0}

    def exploding_act(self: World, text: str):  # noqa: ANN202
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected: world simulator died")
        return real_act(self, text)

    monkeypatch.setattr(World, "act", exploding_act)
    monkeypatch.setattr("scripted_agents.time.sleep", lambda s: None)
    summary = run_eval(make_env(), make_agent("minecraft", None, {}), env_name="minecraft", agent_name="react",
                       task_ids=["mine_log", "mine_sand"], episodes=2, max_steps=4, out_dir=tmp_path, progress=False)
    recs = jsonl_lines(tmp_path / "episodes.jsonl")
    assert [(r["task"], r["episode"]) for r in recs] == [("mine_log", 0), ("mine_log", 1), ("mine_sand", 0),
                                                         ("mine_sand", 1)]
    assert "env crashed" in recs[0]["reason"] and "world simulator died" in recs[0]["reason"]
    assert all(r["reason"] is None and r["steps"] == 4 for r in recs[1:]), [r["reason"] for r in recs]
    assert summary is not None


@pytest.mark.slow
def test_alfworld_game_failing_to_load_recorded_and_run_continues(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_side.envs import alfworld_data as awd
    from llm_side.envs.alfworld import make_env

    root = awd.data_root()
    bad, good = awd.task_ids()[:2]
    data = tmp_path / "alfworld"
    (data / "json_2.1.1").mkdir(parents=True)
    (data / "logic").symlink_to(root / "logic")
    for t in (bad, good):
        shutil.copytree(root / "json_2.1.1" / t, data / "json_2.1.1" / t)
    (data / "json_2.1.1" / bad / "game.tw-pddl").write_text('{"pddl_domain": "(define (domain')  # torn file
    monkeypatch.setattr("scripted_agents.time.sleep", lambda s: None)
    env = make_env(data=str(data), shots=0)
    try:
        run_eval(env, make_agent("alfworld", None, {}), env_name="alfworld", agent_name="react",
                 task_ids=[bad, good], episodes=1, max_steps=2, out_dir=tmp_path / "out", progress=False)
    finally:
        env.close()
    recs = {r["task"]: r for r in jsonl_lines(tmp_path / "out" / "episodes.jsonl")}
    assert set(recs) == {bad, good}
    assert "failed to load" in recs[bad]["reason"] and recs[bad]["steps"] == 0, recs[bad]["reason"]
    assert recs[good]["reason"] is None and recs[good]["steps"] == 2, recs[good]["reason"]


@pytest.mark.slow
def test_metaworld_env_raising_during_adapt_is_restarted_and_logged(tmp_path: Path, pretrained_run: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import jax

    jax.config.update("jax_compilation_cache_dir", JAX_CACHE)  # reuse what the CLI runs compiled
    from muse_jax.loops import adapt as adapt_mod

    real_make, made = adapt_mod.make_vector_env, {"n": 0}

    def crashing_make(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        venv = real_make(*args, **kwargs)
        made["n"] += 1
        if made["n"] == 1:  # the first envs blow up mid-episode; their replacements work
            real_step, steps = venv.step, {"n": 0}

            def step(action):  # noqa: ANN001, ANN202
                steps["n"] += 1
                if steps["n"] == 7:
                    raise RuntimeError("injected: MuJoCo simulation unstable")
                return real_step(action)
            venv.step = step
        return venv

    monkeypatch.setattr(adapt_mod, "make_vector_env", crashing_make)
    out = tmp_path / "adapt"
    res = adapt_mod.adapt(str(pretrained_run), "muse", out, tasks=["coffee-button-v3"], episodes=2,
                          echo=lambda s: None)
    assert made["n"] == 2
    faults = jsonl_lines(out / "faults.jsonl")
    assert len(faults) == 1 and "MuJoCo simulation unstable" in faults[0]["reason"], faults
    recs = jsonl_lines(out / "episodes.jsonl")
    assert sorted(r["episode"] for r in recs) == [0, 1]
    assert res is not None
