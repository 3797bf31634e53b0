"""Environment configuration: the YAML files in this folder and the typed model that validates them."""

from config.loader import DEFAULT_CONFIG, ConfigError, load_config, parse_config
from config.model import StackConfig

__all__ = ["DEFAULT_CONFIG", "ConfigError", "StackConfig", "load_config", "parse_config"]
