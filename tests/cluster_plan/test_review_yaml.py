"""The review YAML is written with libyaml's emitter when PyYAML has it: the same text as PyYAML's."""

from __future__ import annotations

import pytest
import yaml

from cluster_plan.kubernetes_values import review_plan
from cluster_plan.review_files import _ReadableDumper, _represent_str, kubernetes_yaml
from config import load_config
from tests.conftest import REPO_ROOT


class _PythonDumper(yaml.SafeDumper):
    pass


_PythonDumper.add_representer(str, _represent_str)


@pytest.mark.parametrize("config", ["default.yaml", "example.yaml"])
def test_the_fast_emitter_writes_what_pyyaml_writes(config: str) -> None:
    assert yaml.__with_libyaml__, "PyYAML without libyaml: the review files are written by PyYAML itself"
    assert issubclass(_ReadableDumper, yaml.CSafeDumper)
    for step in review_plan(load_config(REPO_ROOT / "config" / config)).manifest_sets():
        expected = yaml.dump_all(
            [dict(m) for m in step.manifests], Dumper=_PythonDumper, sort_keys=False, default_flow_style=False
        )
        assert kubernetes_yaml(step).endswith(expected), step.name
