"""Names for objects that Kubernetes or Volcano will not update in place.

A batch/v1 Job's pod template is immutable, and Volcano refuses almost any change to a Job's spec:
such an object is named after a hash of everything rendered into it, so any change is a new object
(and the deployment deletes the old one) instead of an update the API server refuses.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import cdk8s
from constructs import Construct

__all__ = ["NAME_PLACEHOLDER", "spec_hash"]

NAME_PLACEHOLDER = "name-placeholder"
"""What ``build`` gets for the name it does not know yet."""


def spec_hash(build: Callable[[Construct, str], object], *, kind: str) -> str:
    """Eight hex digits of a hash of the spec of the one ``kind`` object ``build(scope, name)`` renders.

    ``build`` renders with ``NAME_PLACEHOLDER`` for a name; the hash covers the spec (the name and
    anything derived from it, such as labels, render as the placeholder). A spec holding a CDK
    token is refused: its identity would not be known at synth time.
    """
    chart = cdk8s.Chart(cdk8s.App(), "identity")
    build(chart, NAME_PLACEHOLDER)
    [rendered] = [manifest for manifest in chart.to_json() if manifest["kind"] == kind]
    text = json.dumps(rendered["spec"], sort_keys=True)
    if "${Token[" in text:
        raise ValueError(f"a {kind}'s spec holds a deploy-time token; its identity must be known at synth")
    return hashlib.sha256(text.encode()).hexdigest()[:8]
