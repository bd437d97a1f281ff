"""The 50 Metagent-P tasks: ids, levels, limits, and that each is solvable with the real recipes."""

from __future__ import annotations

import pytest

from llm_side.envs.minecraft import MinecraftEnv, make_env, report_tables
from llm_side.envs.minecraft.data import load_game_data
from llm_side.envs.minecraft.solver import reachable, run_oracle, solve
from llm_side.envs.minecraft.tasks import LEVELS, TASKS, task_ids
from llm_side.envs.minecraft.world import World
from llm_side.harness.contracts import TextEnv
from llm_side.registry import env_factory


def test_fifty_tasks_with_table7_levels_and_limits():
    ids = task_ids()
    assert len(ids) == 50 == len(set(ids))
    counts = {lv: len(task_ids(lv)) for lv in LEVELS}
    assert counts == {lv: 10 for lv in LEVELS}  # Table 7: 10 tasks per level
    assert TASKS["mine_iron_ore"].level == "medium"  # Table 7 (8 sub-goals, stone pickaxe)
    assert ids[-1] == "craft_raw_gold_block" and TASKS[ids[-1]].name == "craft raw gold block"  # Table 8
    assert {TASKS[t].tick_limit for t in task_ids("basic") + task_ids("easy")} == {12000}
    assert {TASKS[t].tick_limit for t in task_ids("medium")} == {24000}
    assert {TASKS[t].tick_limit for t in task_ids("hard") + task_ids("complex")} == {36000}
    assert TASKS["craft_iron_pickaxe"].subgoals == 11 and TASKS["obtain_diamond"].tool == "iron pickaxe"
    with pytest.raises(ValueError, match="level"):
        task_ids("nether")


def test_every_target_is_a_real_reachable_item():
    data = load_game_data()
    reach = reachable(data)
    for t in TASKS.values():
        assert data.known(t.target), t
        assert t.target in reach, t


@pytest.mark.parametrize("task_id", task_ids())
def test_every_task_is_solved_by_a_plan_over_the_real_recipes(task_id):
    task = TASKS[task_id]
    world = World(load_game_data(), seed=7, hazards=True)
    plan = solve(world, task.target)
    assert plan, task_id
    ok, log = run_oracle(world, task.target, tick_limit=task.tick_limit)
    assert ok, (task_id, world.elapsed, log[-3:])
    assert world.elapsed <= task.tick_limit and not world.dead
    if task.level in ("hard", "complex") and task.target not in ("iron_ore",):
        assert any(a.startswith(("smelt", "craft")) for a, _ in log)


def test_env_contract_reset_step_and_success():
    env = env_factory("minecraft")()
    assert isinstance(env, TextEnv) and isinstance(env, MinecraftEnv)
    obs = env.reset("craft_planks", seed=0)
    assert "oak_planks" in obs.task and "Inventory: empty" in obs.text
    for a in ["find log", "approach log", "mine log"]:
        r = env.step(a)
        assert not r.done and r.observation.startswith("OK")
    r = env.step("craft planks")
    assert r.done and r.won and r.reward == 1.0
    r = make_env(hazards="false").reset("mine_dirt")
    with pytest.raises(ValueError, match="unknown minecraft option"):
        make_env(colour="blue")


def test_time_limit_ends_the_episode():
    env = make_env(hazards="false")
    env.reset("mine_log", seed=1)
    env.world.elapsed = TASKS["mine_log"].tick_limit - 1
    r = env.step("find diamond_ore")
    assert r.done and not r.won and "Time is up" in r.observation


def test_report_tables_in_table2_layout():
    pools = {"rule_pool": 1, "success_pool": 1, "failure_pool": 0}
    recs = [
        {"env": "minecraft", "task": "mine_log", "agent": "metagent-p", "success": True, "replans": 0,
         "recoveries": 0, **pools},
        {"env": "minecraft", "task": "mine_log", "agent": "metagent-p", "success": False, "replans": 2,
         "recoveries": 2, **pools, "rule_pool": 3, "failure_pool": 2},
        {"env": "minecraft", "task": "craft_iron_pickaxe", "agent": "deps", "success": False, "replans": 5},
        {"env": "minecraft", "task": "mine_log", "agent": "metagent-p", "ablation": "base", "success": False},
    ]
    (t2_title, t2), (t8_title, t8), (t4_title, t4) = report_tables(recs)
    assert "Tables 2-3" in t2_title and "Table 8" in t8_title and "Table 4" in t4_title
    assert "| metagent-p (base) | 0.00 / - |" in t2  # RC over successful episodes: none
    assert "| metagent-p | 1 | 1 | 1 | 0 |" in t4 and "| metagent-p | 2 | 3 | 1 | 2 |" in t4
    assert "| metagent-p | 50.00 / 0.0 | - | - | - | - |" in t2  # the failed episode's 2 recoveries don't count
    assert "| deps | - | - | - | 0.00 / - | - |" in t2
    assert "| hard | craft_iron_pickaxe |" in t8
    assert report_tables([{"env": "alfworld", "task": "x"}]) == []


def test_episode_end_is_recorded_and_the_action_cap_counted():
    """Metagent-P records how an episode ended; the report counts episodes cut by the action cap before
    the paper's tick limit."""
    from types import SimpleNamespace

    from llm_side.agents.metagent_p.agent import ended_by
    from llm_side.harness.contracts import EpisodeOutcome

    def env(ticks, dead=False):
        return SimpleNamespace(world=SimpleNamespace(elapsed=ticks, dead=dead), task=SimpleNamespace(tick_limit=12000))

    def out(success=False, reason=None):
        return EpisodeOutcome(task_id="t", episode=0, success=success, steps=300, score=None, trajectory=[],
                              task="", reason=reason)

    assert ended_by(env(900), out()) == {"ended_by": "action_cap", "ticks": 900, "tick_limit": 12000}
    assert ended_by(env(12000), out())["ended_by"] == "tick_limit"
    assert ended_by(env(50, dead=True), out())["ended_by"] == "death"
    assert ended_by(env(50), out(success=True))["ended_by"] == "success"
    assert ended_by(env(50), out(reason="agent error"))["ended_by"] == "error"
    task = next(iter(TASKS))
    recs = [{"env": "minecraft", "task": task, "agent": "metagent-p", "episode": i, "success": False, "steps": 300,
             "ended_by": "action_cap" if i else "tick_limit", "ticks": 600} for i in range(3)]
    title, table = report_tables(recs)[-1]
    assert "how episodes ended" in title and "| metagent-p | 3 | 0 | 1 | 0 | 2 | 0 | 600 |" in table


def test_list_options_fills_sibling_names_in_rules(capsys):
    """`--list-options` shows `alpha + beta = 1 (beta=0.5)`, not a literal `{beta}`."""
    from llm_side.cli import main

    assert main(["run", "--agent", "metagent-p", "--list-options"]) == 0
    out = capsys.readouterr().out
    assert "{beta}" not in out and "alpha + beta = 1 (beta=0.5)" in out
