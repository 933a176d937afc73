"""Configs: `load_config(name)` reads configs/<name>.json into a SystemConfig and a db dict.

`system` holds the keys, their types and the folders (`SystemConfig`, `load_config`); `rules`
holds what the values must mean. The names below are the public ones, as they always were.
"""

from ..errors import ConfigError, closest, lookup
from .dataset_settings import DatasetSettings
from .overrides import (
    DEFAULT_SNAPSHOT,
    parse_overrides,
    snapshot_arg,
    snapshot_or_file_arg,
)
from .system import (
    CONFIG_DIR,
    PROJECT_ROOT,
    SystemConfig,
    apply_overrides,
    check_db_config,
    config_dirs,
    config_path,
    load_config,
    overrides_of,
    read_json,
    run_record,
)

__all__ = ["CONFIG_DIR", "DEFAULT_SNAPSHOT", "PROJECT_ROOT", "ConfigError", "DatasetSettings",
           "SystemConfig", "apply_overrides", "check_db_config", "closest",
           "config_dirs", "config_path", "load_config", "lookup", "overrides_of",
           "parse_overrides", "read_json", "run_record",
           "snapshot_arg", "snapshot_or_file_arg"]
