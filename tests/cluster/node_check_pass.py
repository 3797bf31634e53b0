"""What the node check does on a node whose tools all passed, run with the node check's own program.

``python node_check_pass.py PROGRAM_DIR``, with the node check container's environment (its
``NODE_NAME``, ``TAINT_KEY``, ``CONDITION_TYPE``) and ``KUBE_API_*`` pointing at the API server with
a token bound to the node's node-check pod. It imports the program from the directory its ConfigMap
was written to, as the pod does, and makes exactly the program's two writes after a passing verdict
(``node_check.check_node``): its condition on the node's status, then the startup taint lifted, both
judged by the API server's admission policy ``node-check``. The checks themselves (neuron-ls,
nccom-test, EFA loopback, the file system) need a Trainium node; tests/cluster/test_node_check.py
runs the whole program once with stand-ins for them.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, sys.argv[1])

import node_check  # from the ConfigMap's directory (argv[1])
from kube_api import in_cluster
from node_check_verdict import PASSED, Verdict

api = in_cluster()
node = os.environ["NODE_NAME"]
verdict = Verdict(PASSED, "checks stood in for by the cluster tests (tests/cluster/node_check_pass.py)")
node_check.set_condition(api, node, os.environ["CONDITION_TYPE"], verdict)
print(node_check.lift_taint(api, node, os.environ["TAINT_KEY"]))
