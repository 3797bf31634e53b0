"""Environment configuration: the YAML files in this folder and the typed model that validates them.

The pipeline file (config/pipeline.py) names several environment files and the waves they deploy in.
"""

from config.loader import DEFAULT_CONFIG, ConfigError, load_config, parse_config
from config.model import StackConfig
from config.pipeline import Pipeline, PipelineConfigError, load_pipeline

__all__ = [
    "DEFAULT_CONFIG",
    "ConfigError",
    "Pipeline",
    "PipelineConfigError",
    "StackConfig",
    "load_config",
    "load_pipeline",
    "parse_config",
]
