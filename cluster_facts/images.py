"""When an image reference counts as pinned: the one rule the configuration and the charts apply.

A pinned image names its registry and either a digest or a tag other than ``latest``:
``registry[:port]/repository[:tag][@sha256:digest]``. Without a registry, the runtime silently
completes the name with Docker Hub (``alpine:3`` is ``docker.io/library/alpine:3``), so a short name
does not say where the image comes from and is refused too.
"""

from __future__ import annotations

import re

__all__ = ["is_pinned_image", "pinned_image_problem", "split_image"]

# The distribution reference grammar (github.com/distribution/reference, regexp.go). As there, a
# first component is a registry domain when it has a dot, a port or is localhost.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_DOMAIN = rf"(?:{_LABEL}(?:\.{_LABEL})+(?::\d+)?|{_LABEL}:\d+|localhost)"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"(?P<domain>{_DOMAIN})/(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?"
)


def pinned_image_problem(image: str) -> str | None:
    """Why ``image`` is not a pinned reference, or None when it is."""
    match = _REFERENCE.fullmatch(image)
    pinned = match is not None and (match["digest"] is not None or match["tag"] not in (None, "latest"))
    if not pinned:
        return (
            f"{image!r} is not a pinned image: name it registry/repository:tag (not latest) "
            "or registry/repository@sha256:digest"
        )
    return None


def is_pinned_image(image: str) -> bool:
    return pinned_image_problem(image) is None


def split_image(image: str) -> tuple[str, str, str | None, str | None]:
    """``(registry, repository path, tag, digest)`` of a pinned reference; ValueError otherwise."""
    problem = pinned_image_problem(image)
    match = _REFERENCE.fullmatch(image)
    if problem is not None or match is None:
        raise ValueError(problem)
    return match["domain"], match["path"], match["tag"], match["digest"]
