"""Shared fixtures: each stack is synthesized once per test session, then only read."""

from __future__ import annotations

import functools
import inspect
import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# The project's Node.js 24 (in .venv/bin) runs jsii, whichever way pytest was started.
os.environ["PATH"] = f"{REPO_ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
# The support checks of the Kubernetes version read the date (cluster_facts/kubernetes_versions.py):
# the suite runs on a fixed one, for processes it starts too, so a test of 1.33 does not turn red
# on a calendar day. tests/cluster_facts/test_kubernetes_versions.py asks the real clock about the default.
SYNTH_DATE = "2026-11-28"
os.environ["TRAINIUM_SYNTH_DATE"] = SYNTH_DATE

import aws_cdk as cdk  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402

from config import load_config  # noqa: E402
from config.model import StackConfig  # noqa: E402
from constructs_trn.nag import add_aws_solutions_checks  # noqa: E402
from stacks.trainium_stack import TrainiumStack, add_trainium_stack  # noqa: E402

# The slow tier (`make check` leaves it out, `make test` runs it): real processes and tools (torchrun
# and etcd, the cdk CLI, cfn-lint, checkov, TorchX's CLI, the pipeline's assets, and every test
# marked `process`: a pod or build script under bash, pip, git, a program against a stand-in API),
# and whatever needs a whole stack synthesized (about 15 s per configuration, once per session).
# A test outside the slow tier that starts a process fails and says to mark it (`_no_process`).
_SLOW_PATHS = (
    "tests/runtime/",
    "tests/guardrails/",
    "tests/pipeline/test_pipeline_stack.py",
    "tests/test_cli.py",
    "tests/torchx_trn/test_torchx_component.py",
    "tests/test_makefile.py",
)
_SLOW_FIXTURES = {"default_stack", "example_stack"}
# Calls that synthesize a whole stack or run an external tool from a test anywhere in the suite.
_SLOW_CALLS = ("synthesize(", "add_trainium_stack(", "checkov(")


def _is_slow(item: pytest.Item) -> bool:
    """Asks for a whole stack (by fixture, by name through ``request``, or by synthesizing one), or
    runs one of the slow tools itself."""
    if _SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and _SLOW_FIXTURES & {str(value) for value in callspec.params.values()}:
        return True
    functions = [getattr(item, "function", None)]
    # The fixtures it uses (a module's own fixture that synthesizes a stack of its making).
    fixture_info = getattr(item, "_fixtureinfo", None)
    if fixture_info is not None:
        functions += [d.func for defs in fixture_info.name2fixturedefs.values() for d in defs]
    return any(call in _source(function) for function in functions for call in _SLOW_CALLS)


@functools.cache
def _source(function: Callable[..., object] | None) -> str:
    try:
        return inspect.getsource(function) if function is not None else ""
    except (OSError, TypeError):
        return ""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath)).relative_to(REPO_ROOT).as_posix()
        if path.startswith(_SLOW_PATHS) or item.get_closest_marker("process") or _is_slow(item):
            item.add_marker(pytest.mark.slow)


_start_process = subprocess.Popen.__init__


@pytest.fixture(autouse=True)
def _no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keeps the fast tier free of processes: a test that starts one must say so (``process``)."""
    if request.node.get_closest_marker("slow"):
        return

    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError(
            f"{request.node.nodeid} starts a process: mark it @pytest.mark.process (the slow tier)"
        )

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


DEFAULT_CONFIG = REPO_ROOT / "config" / "default.yaml"
EXAMPLE_CONFIG = REPO_ROOT / "config" / "example.yaml"


@dataclass(frozen=True)
class Synthesized:
    config: StackConfig
    stack: TrainiumStack
    template: Template
    assembly_dir: Path
    """The cloud assembly: templates, manifest and the policy validation report."""

    @property
    def json(self) -> dict[str, Any]:
        return self.template.to_json()

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.json["Resources"].items()
            if resource["Type"] == resource_type
        }

    def logical_id(self, construct: Any) -> str:
        """The logical id of an L2 construct's resource (or of an L1 resource itself)."""
        element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
        return self.stack.resolve(self.stack.get_logical_id(element))

    def only(self, resource_type: str) -> tuple[str, dict[str, Any]]:
        found = self.resources(resource_type)
        assert len(found) == 1, f"expected one {resource_type}, found {sorted(found)}"
        return next(iter(found.items()))


def project_context() -> dict[str, Any]:
    """cdk.json's context (the feature flags): tests must build what `cdk synth` builds."""
    return dict(json.loads((REPO_ROOT / "cdk.json").read_text())["context"])


def synthesize(config: StackConfig) -> Synthesized:
    """Build the stack as app.py does, cdk-nag included: an unacknowledged finding fails here."""
    app = cdk.App(context=project_context())
    add_aws_solutions_checks(app)
    stack = add_trainium_stack(app, config)
    template = Template.from_stack(stack)
    # The app has synthesized already; synth() returns that same assembly.
    assembly_dir = Path(app.synth().directory)
    return Synthesized(config=config, stack=stack, template=template, assembly_dir=assembly_dir)


@pytest.fixture(scope="session")
def default_stack() -> Synthesized:
    """TrainiumStack from config/default.yaml: 2 x trn1.32xlarge, PERSISTENT_2, public endpoint."""
    return synthesize(load_config(DEFAULT_CONFIG))


@pytest.fixture(scope="session")
def example_stack() -> Synthesized:
    """TrainiumStack from config/example.yaml: trn1n.32xlarge with an ODCR and a Capacity Block group."""
    return synthesize(load_config(EXAMPLE_CONFIG))


def as_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
