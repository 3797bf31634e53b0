"""What a valid configuration should still hear at synth: pins that age or rest on a declaration.

Not problems (config/consistency.py refuses those): each notice is a warning the synth prints (a CDK
warning annotation on the stack, stacks/trainium_stack.py) and the summary page repeats, one line
naming the key:

- the Kubernetes version's standard support ends within 90 days or has ended (the date, and what
  extended support costs more: cluster_facts/kubernetes_versions.py);
- a node group's AMI release is not in the table and its driver and containerd rest on the
  configuration's ``ami_facts`` (preflight asks AWS that the release exists);
- the cluster's size (the Trainium groups' ``max_size``) asks for a setting it does not have: a
  provisioned control plane tier, or care past what the autoscaler or Kubernetes is tested at
  (config/scale.py).
"""

from __future__ import annotations

from datetime import date

from cluster_facts.ami_releases import AMI_RELEASES
from cluster_facts.kubernetes_versions import support_notice
from config.model import StackConfig
from config.scale import scale_notices

__all__ = ["Notice", "configuration_notices"]

Notice = tuple[str, str]
"""(key path, message)."""


def configuration_notices(config: StackConfig, today: date) -> list[Notice]:
    notices: list[Notice] = []
    version = config.cluster.kubernetes_version
    support = support_notice(version, today)
    if support is not None:
        notices.append(("cluster.kubernetes_version", support))
    for index, group in enumerate(config.trainium.node_groups):
        if group.ami_facts is None or group.ami_release is None or group.ami_release in AMI_RELEASES:
            continue
        notices.append(
            (
                f"trainium.node_groups[{index}].ami_facts",
                (
                    f"AMI release {group.ami_release} is not in the table (cluster_facts/ami_releases.py): its "
                    f"Neuron driver {group.ami_facts.neuron_driver} and containerd {group.ami_facts.containerd} "
                    "rest on this declaration, not on a source the project has read; `make preflight` asks AWS "
                    "that the release exists"
                ),
            )
        )
    notices.extend(scale_notices(config))
    return notices
