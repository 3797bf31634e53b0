"""The schema checks themselves: they must reject what the API server or Volcano would reject."""

from __future__ import annotations

from config import load_config
from tests.conftest import DEFAULT_CONFIG
from tests.k8s_validation import KUBERNETES_VERSION, assert_valid, schema_problems

QUEUE = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "Queue",
    "metadata": {"name": "test"},
    "spec": {"weight": 1, "reclaimable": False},
}
SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "etcd-server", "namespace": "default"},
    "spec": {"ports": [{"name": "client", "port": 2379}], "selector": {"app": "etcd"}},
}


def test_valid_objects_pass() -> None:
    assert_valid([QUEUE, SERVICE])


def test_unknown_field_in_a_builtin_kind_fails() -> None:
    bad = {**SERVICE, "spec": {**SERVICE["spec"], "portz": []}}
    [problem] = schema_problems(bad)
    assert problem.startswith("Service/etcd-server: spec: ") and "portz" in problem


def test_wrong_type_in_a_builtin_kind_fails() -> None:
    bad = {**SERVICE, "spec": {**SERVICE["spec"], "ports": [{"port": "2379"}]}}
    assert schema_problems(bad)


def test_unknown_field_in_a_volcano_kind_fails() -> None:
    bad = {**QUEUE, "spec": {**QUEUE["spec"], "weigth": 1}}
    [problem] = schema_problems(bad)
    assert problem.startswith("Queue/test: spec: ") and "weigth" in problem


def test_kind_without_a_schema_fails() -> None:
    [problem] = schema_problems({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
    assert "no schema" in problem


def test_built_in_kinds_are_checked_against_the_default_kubernetes_minor() -> None:
    """The schemas follow the default configuration's version (a version bump moves both)."""
    default = load_config(DEFAULT_CONFIG).cluster.kubernetes_version
    assert KUBERNETES_VERSION.rsplit(".", 1)[0] == default
