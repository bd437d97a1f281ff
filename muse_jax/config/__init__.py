"""Configuration of a MUSE world-model run: `schema` (what a run is made of, with each field's allowed
values) and `load` (named configs, YAML, `--set` overrides, resume compatibility). Import from here."""

from muse_jax.config.load import (
    CONFIG_DIR,
    CONFIG_KEYS_FREE_ON_RESUME,
    closed_loop,
    config_diff,
    explain_conflicts,
    from_dict,
    load_config,
    named_configs,
    parse_overrides,
    read_yaml_mapping,
    resolve_config_path,
    resume_conflicts,
)
from muse_jax.config.schema import (
    MODEL_SIZES,
    AdaptConfig,
    BehaviorConfig,
    Config,
    ConfigError,
    EnvConfig,
    LossConfig,
    ModelConfig,
    OptimConfig,
    ParallelConfig,
    RegulationConfig,
    ReplayConfig,
    TrainConfig,
    validate,
)

__all__ = [
    "CONFIG_DIR", "CONFIG_KEYS_FREE_ON_RESUME", "MODEL_SIZES", "AdaptConfig", "BehaviorConfig", "Config",
    "ConfigError", "EnvConfig", "LossConfig", "ModelConfig", "OptimConfig", "ParallelConfig", "RegulationConfig",
    "ReplayConfig", "TrainConfig", "closed_loop", "config_diff", "explain_conflicts", "from_dict", "load_config",
    "named_configs",
    "parse_overrides", "read_yaml_mapping", "resolve_config_path", "resume_conflicts", "validate",
]
