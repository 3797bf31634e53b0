"""What CloudFormation would do between two templates of TrainiumStack: add, update, replace, remove.

Which property changes replace a resource: CloudFormation's own update behaviours ("Update requires:
Replacement" in the template reference, https://docs.aws.amazon.com/AWSCloudFormation/latest/
TemplateReference/aws-template-resource-type-ref.html), read from the resource provider schemas
that cfn-lint ships (``createOnlyProperties``: the property can be set only when the resource is
created, so changing it replaces the resource), plus ``CONDITIONAL_REPLACEMENTS`` for what those
schemas leave out. A replacement cascades: a property that refers (``Ref``, ``Fn::GetAtt``) to a
replaced resource changes with it, and may replace its own resource ("may be replaced", as ``cdk
diff`` says). A replacement of a resource that keeps a custom name fails: "If you specify a name,
you can't perform updates that require replacement of this resource" (CloudFormation, "Name type",
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-name.html).

A model of CloudFormation's planning, offline: ``cdk diff`` against a deployed stack (``make diff``)
asks CloudFormation itself; where the two disagree, CloudFormation is right.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "CONDITIONAL_REPLACEMENTS",
    "NAME_PROPERTIES",
    "Change",
    "changed_paths",
    "render",
    "replacement_properties",
    "template_changes",
]

Action = Literal["add", "remove", "update", "replace", "may replace"]

CONDITIONAL_REPLACEMENTS: Mapping[str, tuple[str, ...]] = {
    # The FSx for Lustre file system reference: "Update requires: Replacement" for the deployment
    # type, the storage type and (SCRATCH and PERSISTENT_1) the data repository paths, which the
    # provider schema leaves out of createOnlyProperties because updates of other types allow them.
    "AWS::FSx::FileSystem": (
        "LustreConfiguration/DeploymentType",
        "StorageType",
        "LustreConfiguration/ImportPath",
        "LustreConfiguration/ExportPath",
    ),
}
"""Replacements by resource type that the provider schemas do not mark, with their source."""

CHANGED_BY_UPDATE: frozenset[tuple[str, str]] = frozenset(
    {("AWS::EC2::LaunchTemplate", "LatestVersionNumber")}
)
"""(type, attribute): a ``Fn::GetAtt`` that changes when the resource is updated in place (every
update of a launch template's data is a new version, AWS::EC2::LaunchTemplate return values)."""

NAME_PROPERTIES: Mapping[str, str] = {
    "AWS::EKS::Nodegroup": "NodegroupName",
    "AWS::EKS::Cluster": "Name",
    "AWS::ECR::Repository": "RepositoryName",
    "AWS::IAM::Role": "RoleName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::EC2::LaunchTemplate": "LaunchTemplateName",
    "AWS::CloudWatch::Dashboard": "DashboardName",
}
"""The custom-name property of the resource types this stack names."""


@functools.cache
def replacement_properties(resource_type: str) -> tuple[str, ...] | None:
    """Property paths (``A/B``) whose change replaces a resource of ``resource_type``; None when the
    type has no provider schema (a custom resource: its handler decides)."""
    if resource_type.startswith("Custom::") or resource_type == "AWS::CloudFormation::CustomResource":
        return None
    from cfnlint.schema import (  # type: ignore[import-untyped]  # noqa: PLC0415 (0.5 s; make review only)
        PROVIDER_SCHEMA_MANAGER,
    )

    try:
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource_type).schema
    except Exception:  # noqa: BLE001 (cfn-lint raises its own ResourceNotFoundError)
        return None
    pointers = [pointer.removeprefix("/properties/") for pointer in schema.get("createOnlyProperties", [])]
    return tuple(sorted({*pointers, *CONDITIONAL_REPLACEMENTS.get(resource_type, ())}))


def changed_paths(before: Any, after: Any, prefix: str = "") -> list[str]:
    """The property paths whose values differ: keys of objects recursively, lists as a whole."""
    if isinstance(before, Mapping) and isinstance(after, Mapping) and not _intrinsic(before, after):
        paths: list[str] = []
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                paths += changed_paths(before.get(key), after.get(key), f"{prefix}{key}/")
        return paths
    return [prefix.rstrip("/")] if before != after else []


def _intrinsic(*values: Mapping[str, Any]) -> bool:
    return any(len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref")) for value in values)


def _replaces(path: str, replacing: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + "/") or p.startswith(path + "/") for p in replacing)


def _references(value: Any) -> Iterator[tuple[str, str | None]]:
    """(logical id, attribute; None for ``Ref``) of everything a property value refers to."""
    if isinstance(value, Mapping):
        if isinstance(value.get("Ref"), str):
            yield value["Ref"], None
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            parts = [str(part) for part in target] if isinstance(target, list) else str(target).split(".", 1)
            yield parts[0], parts[1] if len(parts) > 1 else ""
        for item in value.values():
            yield from _references(item)
    elif isinstance(value, list):
        for item in value:
            yield from _references(item)


@dataclass(frozen=True)
class Change:
    logical_id: str
    resource_type: str
    action: Action
    paths: tuple[str, ...] = ()
    """The changed properties (``A/B``)."""
    replacing: tuple[str, ...] = ()
    """The changed properties that replace the resource (or may, through a replaced reference)."""
    because_of: tuple[str, ...] = ()
    """Replaced resources this one refers to, for "may replace"."""
    name: str | None = None
    """The custom name the resource keeps, when a replacement would need a new one."""
    path: str = ""
    """The construct path (``aws:cdk:path``), for people."""

    @property
    def fails(self) -> bool:
        """A replacement CloudFormation cannot make: the resource keeps its custom name."""
        return self.action in ("replace", "may replace") and self.name is not None


def _construct_path(resource: Mapping[str, Any]) -> str:
    path = str(resource.get("Metadata", {}).get("aws:cdk:path", ""))
    return path.removesuffix("/Resource").removesuffix("/Default")


def _kept_name(resource_type: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> str | None:
    prop = NAME_PROPERTIES.get(resource_type)
    if prop is None:
        return None
    name = after.get(prop)
    return name if isinstance(name, str) and before.get(prop) == name else None


def template_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    """Every resource CloudFormation would add, update, replace or remove, by logical id."""
    old, new = before.get("Resources", {}), after.get("Resources", {})
    changes: dict[str, Change] = {}
    for logical_id in sorted(set(old) | set(new)):
        was, now = old.get(logical_id), new.get(logical_id)
        if was is None or now is None or was["Type"] != now["Type"]:
            if was is not None:
                changes[f"-{logical_id}"] = Change(
                    logical_id, was["Type"], "remove", path=_construct_path(was)
                )
            if now is not None:
                changes[logical_id] = Change(logical_id, now["Type"], "add", path=_construct_path(now))
            continue
        paths = tuple(changed_paths(was.get("Properties", {}), now.get("Properties", {})))
        if not paths:
            continue
        replacing = tuple(p for p in paths if _replaces(p, replacement_properties(now["Type"]) or ()))
        changes[logical_id] = Change(
            logical_id,
            now["Type"],
            "replace" if replacing else "update",
            paths,
            replacing,
            name=_kept_name(now["Type"], was.get("Properties", {}), now.get("Properties", {}))
            if replacing
            else None,
            path=_construct_path(now),
        )
    _cascade(changes, old, new)
    return sorted(changes.values(), key=lambda change: (change.path, change.logical_id, change.action))


def _moved(change: Change, attribute: str | None) -> bool:
    """Whether a reference to ``change``'s resource (``Ref``, or ``Fn::GetAtt`` of ``attribute``) changes."""
    if change.action in ("replace", "may replace"):
        return True
    return change.action == "update" and (change.resource_type, attribute or "") in CHANGED_BY_UPDATE


def _cascade(changes: dict[str, Change], old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Properties that refer to a replaced resource (or to an attribute an update changes) change
    with it; mark what that updates or may replace, until nothing more changes."""
    while True:
        state = {key: (change.action, change.paths) for key, change in changes.items()}
        for logical_id, resource in new.items():
            if logical_id not in old or old[logical_id]["Type"] != resource["Type"]:
                continue
            current = changes.get(logical_id)
            if current is not None and current.action in ("replace", "may replace"):
                continue
            follow = {
                key: ids
                for key, value in resource.get("Properties", {}).items()
                if (
                    ids := {
                        target
                        for target, attribute in _references(value)
                        if target in changes and _moved(changes[target], attribute)
                    }
                )
            }
            if not follow:
                continue
            replacing = tuple(
                key for key in follow if _replaces(key, replacement_properties(resource["Type"]) or ())
            )
            before = old[logical_id].get("Properties", {})
            changes[logical_id] = Change(
                logical_id,
                resource["Type"],
                "may replace" if replacing else "update",
                tuple(sorted({*(current.paths if current else ()), *follow})),
                replacing,
                because_of=tuple(sorted({i for key in (replacing or tuple(follow)) for i in follow[key]})),
                name=_kept_name(resource["Type"], before, resource.get("Properties", {}))
                if replacing
                else None,
                path=_construct_path(resource),
            )
        if {key: (change.action, change.paths) for key, change in changes.items()} == state:
            return


def _intrinsic_text(key: str, argument: Any) -> str | None:
    if key == "Ref":
        return f"<{argument}>"
    if key == "Fn::GetAtt":
        return f"<{'.'.join(argument) if isinstance(argument, list) else argument}>"
    if key == "Fn::Join" and isinstance(argument, list) and len(argument) == 2:
        return str(argument[0]).join(render(part) for part in argument[1])
    if key == "Fn::Sub":
        return render(argument[0] if isinstance(argument, list) else argument)
    return None


def render(value: Any) -> str:
    """A template value as people read it: ``Ref`` as ``<Id>``, ``Fn::GetAtt`` as ``<Id.Attr>``."""
    if isinstance(value, Mapping) and len(value) == 1:
        text = _intrinsic_text(*next(iter(value.items())))
        if text is not None:
            return text
    if isinstance(value, list):
        return ", ".join(render(item) for item in value)
    return str(value)
