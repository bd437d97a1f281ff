"""Config loading: presets, overrides, and errors that name the key and the allowed values."""

import dataclasses

import pytest

from muse_jax.config import (
    CONFIG_DIR,
    MODEL_SIZES,
    Config,
    ConfigError,
    from_dict,
    load_config,
    parse_overrides,
)


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
def test_every_shipped_config_loads(name):
    cfg = load_config(name)
    assert isinstance(cfg, Config)
    assert cfg.name == name


def test_size_preset_fills_model_and_explicit_keys_win():
    cfg = from_dict({"model": {"size": "size12m"}})
    assert (cfg.model.deter, cfg.model.hidden, cfg.model.classes) == (2048, 256, 16)
    assert (cfg.model.depth, cfg.model.units) == (16, 256)
    cfg = from_dict({"model": {"size": "size12m", "deter": 1024}})
    assert cfg.model.deter == 1024 and cfg.model.hidden == 256


def test_dreamerv3_presets_match_the_reference_numbers():
    assert MODEL_SIZES["size1m"] == dict(deter=512, hidden=64, classes=4, depth=4, units=64)
    assert MODEL_SIZES["size400m"] == dict(deter=12288, hidden=1536, classes=96, depth=96, units=1536)


def test_set_overrides_are_typed():
    cfg = load_config("smoke", ["model.deter=64", "regulation.beta=0.5", "env.tasks=[reach-v3]"])
    assert cfg.model.deter == 64 and isinstance(cfg.model.deter, int)
    assert cfg.regulation.beta == 0.5
    assert cfg.env.tasks == ("reach-v3",)


def test_frozen():
    cfg = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.model = None  # type: ignore[misc]


def test_replace_validates():
    cfg = Config().replace({"model.deter": 256})
    assert cfg.model.deter == 256
    with pytest.raises(ConfigError, match="regulation.horizon"):
        Config().replace({"regulation.horizon": -3})


@pytest.mark.parametrize(
    "overrides, pattern",
    [
        ({"model.detr": 3}, r"unknown config key 'model.detr'.*Did you mean 'deter'"),
        ({"modle.deter": 3}, r"unknown config key 'modle'"),
        ({"model.deter": "big"}, r"'model.deter' must be an integer"),
        ({"regulation.strategy": "beam"}, r"choose one of \['gradient', 'rollouts', 'mcts', 'none', 'mean'\]"),
        ({"regulation.beta": float("nan")}, r"'regulation.beta'.*finite"),
        ({"model.competence_quantiles": 0}, r"competence_quantiles.*N >= 1"),
        ({"behavior.imag_horizon": -1}, r"behavior.imag_horizon"),
        ({"model.size": "huge"}, r"'model.size' = 'huge' is not a preset"),
        ({"model.deter": 100}, r"multiple of model.blocks"),
        ({"replay.unfinished": True}, r"'agent' = 'muse'.*replay.unfinished is on .*--agent dreamer"),
    ],
)
def test_bad_values_name_the_key(overrides, pattern):
    with pytest.raises(ConfigError, match=pattern):
        from_dict({}, overrides)


def test_bad_yaml_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model: {unitz: 3}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: unknown config key 'model.unitz'"):
        load_config(path)


def test_unknown_config_name_lists_choices():
    with pytest.raises(ConfigError, match="smoke"):
        load_config("no-such-config")


def test_override_syntax_error():
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["model.deter"])


def test_bad_override_blames_the_override_not_the_file():
    with pytest.raises(ConfigError, match=r"^--set override: config key 'model.deter'") as info:
        load_config("smoke", ["model.deter=big"])
    assert "smoke.yaml" not in str(info.value)


def test_range_rules_live_with_their_fields():
    """Each range is dataclass metadata beside its field; `validate` is one loop over them."""
    from muse_jax.config.schema import ModelConfig

    (deter,) = [f for f in dataclasses.fields(ModelConfig) if f.name == "deter"]
    words = [rule.words for rule in deter.metadata["allowed"]]
    assert words[0].startswith("at most 16384 (")  # every numeric field has an upper bound with its reason
    assert words[1:] == ["an integer >= 1", "a multiple of model.blocks={blocks}"]
    with pytest.raises(ConfigError, match=r"'model.blocks' = 0 is out of range; allowed: an integer >= 1"):
        from_dict({"model": {"blocks": 0}})


def test_multi_host_needs_replicated_parameters():
    with pytest.raises(ConfigError, match=r"'parallel.param_sharding' = 'fsdp'.*parallel.distributed is true"):
        from_dict({}, {"parallel.distributed": True, "parallel.param_sharding": "fsdp"})
    assert from_dict({}, {"parallel.param_sharding": "fsdp"}).parallel.param_sharding == "fsdp"


def test_named_configs_ship_inside_the_package_and_configs_wm_links_there():
    from pathlib import Path

    import muse_jax

    assert CONFIG_DIR.is_relative_to(Path(muse_jax.__file__).parent)
    repo_link = Path(__file__).resolve().parents[2] / "configs" / "wm"
    assert repo_link.resolve() == CONFIG_DIR.resolve()


def test_resume_reads_a_key_added_later_as_the_old_behaviour_and_refuses_a_real_change():
    """A run saved before `replay.online` (or `model.hidden_bias`) existed resumes with it off (what the code
    did then), but not on."""
    from muse_jax.config.load import KEYS_ADDED_WITH_OLD_BEHAVIOUR, explain_conflicts, resume_conflicts

    cfg = load_config("smoke")
    saved = cfg.to_dict()
    del saved["replay"]["online"]
    assert KEYS_ADDED_WITH_OLD_BEHAVIOUR["replay.online"] is False
    assert resume_conflicts(saved, cfg) == []
    assert resume_conflicts(saved, cfg.replace({"replay.online": True})) == ["replay.online"]
    assert resume_conflicts(saved, cfg.replace({"replay.capacity": 2 * cfg.replay.capacity})) == []  # room to extend
    del saved["model"]["hidden_bias"]  # a run saved before the biases existed: it had none
    assert cfg.model.hidden_bias is True  # the default since: such a run resumes only with them off
    assert resume_conflicts(saved, cfg) == ["model.hidden_bias"]
    assert explain_conflicts(saved, cfg, ["model.hidden_bias"]) == (  # the refusal says how to resume
        "model.hidden_bias is false there, true here", "--set model.hidden_bias=false")
    cfg = cfg.replace({"model.hidden_bias": False})
    assert resume_conflicts(saved, cfg) == []
    del saved["behavior"]["split_policy_out"]  # saved with the one output layer: resumes with it, not two
    assert resume_conflicts(saved, cfg) == []
    assert resume_conflicts(saved, cfg.replace({"behavior.split_policy_out": True})) == ["behavior.split_policy_out"]
    del saved["model"]["observe_unroll"], saved["behavior"]["imag_unroll"]  # speed only: saved
    assert resume_conflicts(saved, cfg) == []  # before they existed, or changed on resume, never a conflict
    assert resume_conflicts(saved, cfg.replace({"model.observe_unroll": 8, "behavior.imag_unroll": 15})) == []
    del saved["behavior"]["actent"]  # a key that is not listed is still a conflict
    assert "behavior.actent" in resume_conflicts(saved, cfg)
