"""The plan of the cluster's Kubernetes layer: what the charts produce and the stack applies.

``k8s_charts.plan`` renders every chart into a ``KubernetesLayerPlan``: an ordered list of steps,
each a Helm release, a set of manifests or a readiness gate, with the steps it must follow at
deploy time and whether this configuration applies it. ``constructs_trn.kubernetes_layer`` turns each applied step into one
custom resource; ``cluster_plan.review_files`` writes every step, applied or not, as YAML for review. The
plan is plain data (rendered objects may hold CDK token strings), so neither side imports the other.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["HelmRelease", "KubernetesLayerPlan", "KubernetesStep", "ManifestSet", "ReadinessGate"]


@dataclass(frozen=True, kw_only=True)
class ManifestSet:
    """Objects applied together by one ``kubectl apply`` (one custom resource)."""

    name: str
    manifests: tuple[Mapping[str, Any], ...]
    after: tuple[str, ...] = ()
    """Steps that must be in place first (at deploy time; runtime order is the objects' own business)."""
    applied: bool = True
    """False: rendered for review and ``kubectl apply`` only; this configuration does not deploy it."""
    identity: str | None = None
    """Part of the custom resource's id when set. Objects that Kubernetes or Volcano will not update
    in place (a Volcano Job, a batch Job) are named after their identity; a new identity makes a new
    custom resource, so CloudFormation creates the new objects and then deletes the old ones."""
    note: str | None = None
    """Said in the review file's header: why the set is empty or what to know before applying it."""


@dataclass(frozen=True, kw_only=True)
class ReadinessGate:
    """Deploy-time wait until ``kubectl get <object_type> <object_name> -o jsonpath=<json_path>``
    prints something (retried every 10 s up to ``timeout_minutes``): the steps after it start
    only once the cluster is in that state."""

    name: str
    object_type: str
    object_name: str
    json_path: str
    namespace: str = "default"
    after: tuple[str, ...] = ()
    applied: bool = True
    timeout_minutes: int = 5
    """How long the gate polls before it fails the deploy (cluster_facts.deploy_timeouts: the kubectl
    handler must still have time to say so)."""
    identity: str | None = None
    """As for ManifestSet: a new identity waits again (for example, after an upgrade of what it waits for)."""


@dataclass(frozen=True, kw_only=True)
class HelmRelease:
    """A chart, installed (and upgraded) as one release, from exactly one of ``chart_directory`` (a
    chart kept in this repository, shipped with the stack's assets) and ``repository`` (a Helm
    repository the kubectl handler downloads from at deploy time)."""

    name: str
    chart: str
    """The chart's name; ``chart`` and ``version`` are what Chart.yaml of ``chart_directory`` says."""
    version: str
    release: str
    namespace: str
    values: Mapping[str, Any] = field(default_factory=dict)
    after: tuple[str, ...] = ()
    applied: bool = True
    wait: bool = True
    """Wait until the release's workloads are ready before the steps after it start."""
    timeout_minutes: int = 5
    """Helm's ``--timeout``: how long it waits for each hook and, with ``wait``, for the release's
    workloads (each its own timeout; cluster_facts.deploy_timeouts adds them up)."""
    hook_waits: int = 0
    """How many hooks of the chart Helm waits for on an install or upgrade (its hook Jobs and Pods)."""
    images: tuple[str, ...] = ()
    """Every image the chart runs with these values, as the values name them (for review and for the
    supply-chain tests: each comes through the account's registry or is a listed exception)."""
    chart_directory: str | None = None
    """The chart's directory, relative to the repository root (cluster_facts.vendored_charts)."""
    repository: str | None = None
    """A Helm repository's URL: the chart is fetched at deploy time, with no check of its content."""

    def __post_init__(self) -> None:
        if (self.chart_directory is None) == (self.repository is None):
            raise ValueError(
                f"Helm release {self.name!r}: give exactly one of chart_directory and repository"
            )

    @property
    def source(self) -> str:
        """Where the chart comes from, for review."""
        return f"{self.chart_directory}/" if self.chart_directory is not None else f"{self.repository}"


KubernetesStep = ManifestSet | HelmRelease | ReadinessGate


@dataclass(frozen=True)
class KubernetesLayerPlan:
    """Steps in deploy order; every ``after`` names an earlier step that is applied whenever this one is."""

    steps: tuple[KubernetesStep, ...]

    def __post_init__(self) -> None:
        seen: dict[str, KubernetesStep] = {}
        for step in self.steps:
            if step.name in seen:
                raise ValueError(f"two steps of the Kubernetes layer are named {step.name!r}")
            for prerequisite in step.after:
                if prerequisite not in seen:
                    raise ValueError(f"{step.name!r} follows {prerequisite!r}, which is not an earlier step")
                if step.applied and not seen[prerequisite].applied:
                    raise ValueError(f"{step.name!r} is applied but follows {prerequisite!r}, which is not")
            seen[step.name] = step

    def __iter__(self) -> Iterator[KubernetesStep]:
        return iter(self.steps)

    @property
    def names(self) -> list[str]:
        return [step.name for step in self.steps]

    def step(self, name: str) -> KubernetesStep:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(f"no step {name!r} in the Kubernetes layer; steps: {', '.join(self.names)}")

    def images(self) -> list[str]:
        """Every image the plan runs, applied or not: each container of each manifest (a pod
        template anywhere in it) and each image of each Helm release, once each, sorted."""
        found: set[str] = set()
        for step in self.steps:
            if isinstance(step, ManifestSet):
                for manifest in step.manifests:
                    found.update(_container_images(manifest))
            elif isinstance(step, HelmRelease):
                found.update(step.images)
        return sorted(found)

    def applied(self) -> list[KubernetesStep]:
        return [step for step in self.steps if step.applied]

    def manifest_sets(self) -> list[ManifestSet]:
        return [step for step in self.steps if isinstance(step, ManifestSet)]

    @staticmethod
    def of(steps: Sequence[KubernetesStep]) -> KubernetesLayerPlan:
        return KubernetesLayerPlan(tuple(steps))

    def with_strings_replaced(self, replacements: Mapping[str, str]) -> KubernetesLayerPlan:
        """The same plan with every occurrence of each key, in every string of every manifest and
        Helm value, replaced by its value: the review plan's ``${StackOutput}`` placeholders become
        the stack's deploy-time tokens without rendering the charts a second time."""
        steps: list[KubernetesStep] = []
        for step in self.steps:
            if isinstance(step, ManifestSet):
                steps.append(
                    replace(step, manifests=tuple(_replaced(m, replacements) for m in step.manifests))
                )
            elif isinstance(step, HelmRelease):
                steps.append(replace(step, values=_replaced(step.values, replacements)))
            else:
                steps.append(step)
        return KubernetesLayerPlan(tuple(steps))


def _container_images(value: Any) -> Iterator[str]:
    """The images of every container list (containers, initContainers) anywhere in ``value``."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key in ("containers", "initContainers") and isinstance(item, list | tuple):
                yield from (str(c["image"]) for c in item if isinstance(c, Mapping) and "image" in c)
            else:
                yield from _container_images(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _container_images(item)


def _replaced(value: Any, replacements: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for old, new in replacements.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, Mapping):
        return {key: _replaced(item, replacements) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_replaced(item, replacements) for item in value]
    return value
