"""What the kubelet does to a container's env, command and args before it starts the container.

Kubernetes expands ``$(NAME)`` to the value of an environment variable defined earlier in the
container's ``env`` (for env values) or anywhere in it (for command and args), leaves references to
undefined names as they are, and turns ``$$`` into ``$`` (third_party/forked/golang/expansion in
kubernetes/kubernetes). Tests run the rendered pods' commands through this, as the kubelet would.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["container_environment", "expand", "expanded_command"]

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, variables: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return variables[name] if name in variables else match.group(0)

    return _REFERENCE.sub(replace, text)


def container_environment(
    container: Mapping[str, Any], *, downward: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The container's environment after expansion; ``downward`` answers fieldRef paths."""
    environment: dict[str, str] = {}
    for variable in container.get("env", []):
        if "value" in variable:
            environment[variable["name"]] = expand(variable["value"], environment)
        else:
            path = variable["valueFrom"]["fieldRef"]["fieldPath"]
            environment[variable["name"]] = (downward or {})[path]
    return environment


def expanded_command(container: Mapping[str, Any], environment: Mapping[str, str]) -> list[str]:
    parts: Sequence[str] = [*container.get("command", []), *container.get("args", [])]
    return [expand(part, environment) for part in parts]
