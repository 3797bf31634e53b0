"""The structured lines the platform's pods print for the dashboard, and the patterns that read them.

The amazon-cloudwatch-observability add-on's Fluent Bit ships every container line of every pod
(but its own, the CloudWatch agent's, aws-node's and kube-proxy's) to the cluster's application log
group, the line in the event's ``log`` field and the pod, namespace and node in
``kubernetes.pod_name``, ``kubernetes.namespace_name`` and ``kubernetes.host`` (aws-observability/
helm-charts, amazon-cloudwatch-observability values.yaml, ``application-log.conf``: ``Path
/var/log/containers/*.log`` with that ``Exclude_Path``, then the ``kubernetes`` filter). Nothing else
the cluster ships holds a run's attempts or the node check's verdicts: Kubernetes events are not
collected by the add-on, and Container Insights' metrics know pods and nodes, not runs.

So two programs print one line per fact, and the dashboard's Logs Insights queries
(constructs_trn/training_dashboard.py) parse them with these patterns:

- cluster_programs/run_worker.sh, as each replica's launcher starts:
  ``TRAINIUM_ATTEMPT run=<run id> attempt=<Volcano job version> replica=<index> node_changed=<0|1>
  resume_step=<step|none> lost_seconds=<seconds>``;
- cluster_programs/node_check.py, for each verdict and action and each pass over a held node:
  ``TRAINIUM_NODE_CHECK node=<node> state=<state> reason=<Reason> <detail>``.

The patterns use only literals, character classes and named groups, which Logs Insights (Java-style
``(?<name>...)``) and Python (tests/constructs_trn/test_training_dashboard.py translates the group syntax) read
alike. tests/constructs_trn/test_training_dashboard.py runs each against lines the programs themselves print.
"""

from __future__ import annotations

__all__ = [
    "ATTEMPT_FILTER",
    "ATTEMPT_PATTERN",
    "NODE_CHECK_FILTER",
    "NODE_CHECK_PATTERN",
    "NODE_CHECK_STATES",
]

ATTEMPT_FILTER = "TRAINIUM_ATTEMPT run="
ATTEMPT_PATTERN = (
    r"TRAINIUM_ATTEMPT run=(?<run>[-a-z0-9]+) attempt=(?<attempt>[0-9]+) replica=(?<replica>[0-9]+) "
    r"node_changed=(?<node_changed>[01]) resume_step=(?<resume_step>[0-9]+|none) "
    r"lost_seconds=(?<lost_seconds>-?[0-9]+)"
)

NODE_CHECK_FILTER = "TRAINIUM_NODE_CHECK node="
NODE_CHECK_PATTERN = (
    r"TRAINIUM_NODE_CHECK node=(?<node>[^ ]+) state=(?<state>[a-z]+) reason=(?<reason>[A-Za-z0-9]+)"
)
NODE_CHECK_STATES = ("passed", "failed", "held", "suspect", "cleared", "fenced", "withheld", "stopped")
"""The node check's states (cluster_programs/node_check.py ``STATES``): passed/failed a new node's
verdict (a failed node is replaced), held a pass over a node still tainted by the check, suspect EFA
errors on a node in use, cleared a suspect node that passed its loopback again, fenced an
unresponsive node's instance marked Unhealthy by another node's check, withheld a replacement the
group's budget did not allow (the node keeps a taint with its reason), stopped a group whose launches
were suspended because a replacement failed the same way."""
