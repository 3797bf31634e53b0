"""A real Kubernetes 1.36 control plane on loopback, with Volcano, kwok's simulated nodes and the gang
watchdog, and the plan applied as aws-cdk-lib's kubectl handler applies it.

Every process listens on 127.0.0.1 only, writes its output to a file under the session's temporary
directory, is waited for with a bound, and is stopped by its PID (``ControlPlane.stop``). What runs:

- etcd 3.5 (.venv-torch), kube-apiserver (RBAC and Node authorization, the default admission chain
  plus EKS's NodeRestriction and ExtendedResourceToleration, so PodSecurity and
  ValidatingAdmissionPolicy decide as on EKS; EKS's Service range 10.100.0.0/16; service-account
  tokens signed with a key made here; the admin is a client certificate in ``system:masters``),
  kube-controller-manager (each controller with its own service account) and kube-scheduler;
- kwok, the kubelet of every node: nodes and pods are API objects whose status kwok writes
  (tests/cluster/kwok_stages.yaml); no container runs;
- after the plan's Volcano release is installed (its Deployments' pods simulated on the system
  nodes, so Helm's wait means what it means on EKS), Volcano's scheduler, controller manager and
  webhook manager as local processes, with the arguments, configuration files and service
  accounts of the Deployments the chart rendered (read back from the API server, not retyped),
  the webhook reachable from the API server through tests/cluster/egress.py;
- after the plan's gang-watchdog step, the watchdog program from its ConfigMap, with the arguments
  of its Deployment and its own service account's token;
- for each Trainium node added, the node check's writes once its tools have passed (the node
  check's pod on that node is real, simulated by kwok; its program's ``set_condition`` and
  ``lift_taint`` run from its ConfigMap with a token bound to that pod, so the API server's
  ``node-check`` admission policy judges them): tests/cluster/node_check_pass.py.

The cluster autoscaler is not started here: its Helm release is installed and its pod simulated.
tests/cluster/autoscaler.py starts the real one (release 1.33.0) for the scenarios that ask it; the
others add the nodes it would add, and ``autoscaler_note`` says so.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster_facts.kubernetes_names import CDK_PRUNE_LABEL_PREFIX
from cluster_facts.kubernetes_plan import HelmRelease, KubernetesLayerPlan, ManifestSet, ReadinessGate
from cluster_facts.node_check import (
    NODE_CHECK_NAME,
    NODE_CHECK_NAMESPACE,
    NODE_CHECK_TAINT_KEY,
    NODE_FENCE_NAME,
)
from cluster_facts.vendored_charts import repository_path
from cluster_facts.versions import VOLCANO_IMAGE_NAMES
from k8s_charts.checks import gang_watchdog
from tests.cluster.binaries import Binaries
from tests.cluster.egress import EgressProxy
from tests.cluster.nodes import KWOK_NODE_ANNOTATION, csi_node
from tests.cluster.pki import CertificateAuthority, KeyPair, service_account_keys
from tests.cluster.processes import CLIENT_ENVIRONMENT, Process, Processes, free_port, wait_until
from tests.cluster.real_nodes import NODE_GATEWAY, RealNodes, find_node_binaries

__all__ = ["SERVICE_CIDR", "ApplyReport", "ControlPlane", "Kubectl", "StepResult"]

SERVICE_CIDR = "10.100.0.0/16"
"""EKS's default Service range (the API server's own Service is 10.100.0.1)."""
ISSUER = "https://kubernetes.default.svc"
PRUNE_LABEL_PREFIX = CDK_PRUNE_LABEL_PREFIX
KWOK_STAGES = Path(__file__).with_name("kwok_stages.yaml")
NODE_CHECK_PASS = Path(__file__).with_name("node_check_pass.py")
# The deploy-time readiness gates poll every 10 s in the handler; here every second (same outcome).
GATE_INTERVAL_SECONDS = 1.0
QUOTA_RESYNC_SECONDS = 30
"""The quota controller's full resync here (``--resource-quota-sync-period``); Kubernetes' default is
5 minutes (EKS documents no other; v1.36.3 pkg/controller/resourcequota/config/v1alpha1/defaults.go).
A quota made before the controller has found Volcano's resources by discovery (every 30 s) gets their
count only at this resync (``addQuota`` queues it once; ``Sync`` starts the new monitors but queues no
quota), so every first plan of a control plane waited those 5 minutes at its quota gates; what the
gates decide, that no team object is admitted before its quota counts Volcano's Jobs, is the same."""
APPLY_WORKERS = 8
"""At most this many steps at once in ``apply_plan(concurrent=True)`` (kubectl and helm processes on two cores)."""
NODE_MONITOR_GRACE_SECONDS = 20
"""The controller manager's ``--node-monitor-grace-period`` here: 20 s instead of Kubernetes' 50 s
(the product's bound, cluster_facts/failure_recovery.py), so a lost node is marked sooner
(tests/cluster/test_recovery.py). kwok renews every node's Lease each 10 s (a quarter of
``--node-lease-duration-seconds``, as the kubelet does), so a live node never comes near it."""
((KWOK_NODE_KEY, KWOK_NODE_VALUE),) = KWOK_NODE_ANNOTATION.items()


@dataclass
class Kubectl:
    """kubectl against the control plane, as the admin or as an impersonated user."""

    binary: Path
    kubeconfig: Path
    impersonate: tuple[str, tuple[str, ...]] | None = None

    def args(self, *args: str) -> list[str]:
        command = [str(self.binary), "--kubeconfig", str(self.kubeconfig)]
        if self.impersonate is not None:
            user, groups = self.impersonate
            command += ["--as", user, *(f"--as-group={group}" for group in groups)]
        return [*command, *args]

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            self.args(*args),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, **CLIENT_ENVIRONMENT},
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}{result.stdout}"
            )
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json").stdout)

    def can_i(
        self, verb: str, resource: str, *, namespace: str | None = None, subresource: str | None = None
    ) -> bool:
        args = ["auth", "can-i", verb, resource]
        if namespace is not None:
            args += ["-n", namespace]
        if subresource is not None:
            args += ["--subresource", subresource]
        return self(*args, check=False).stdout.strip() == "yes"


@dataclass
class StepResult:
    name: str
    action: str
    """Create, Update, Delete (what CloudFormation would ask the handler for) or Unchanged."""
    output: str = ""
    seconds: float = 0.0


@dataclass
class ApplyReport:
    steps: list[StepResult] = field(default_factory=list)

    def step(self, name: str) -> StepResult:
        for result in self.steps:
            if result.name == name:
                return result
        raise KeyError(name)

    def configured(self) -> list[str]:
        """Every ``kubectl apply`` output line that changed an object (``configured`` or ``created``)."""
        return [
            f"{result.name}: {line}"
            for result in self.steps
            if result.action in ("Create", "Update")
            for line in result.output.splitlines()
            if line.endswith((" configured", " created"))
        ]

    def changed_but_budgets(self) -> list[str]:
        """``configured()`` without the PodDisruptionBudgets' lines: a budget always reads "configured"
        (its spec.selector has the patch strategy "replace", so kubectl's computed patch is never
        empty even for an unchanged object, as Azure/eno#246 found for the same field). Whether one
        changed is for ``ControlPlane.stored_differences`` to say."""
        return [line for line in self.configured() if " poddisruptionbudget.policy/" not in line]


@dataclass
class _Deployed:
    step: ManifestSet | HelmRelease | ReadinessGate
    properties: str


@dataclass
class ControlPlane:
    binaries: Binaries
    work_dir: Path
    processes: Processes = field(init=False)
    egress: EgressProxy = field(init=False)
    api_port: int = 0
    kubeconfig: Path = field(init=False)
    kubectl: Kubectl = field(init=False)
    ca: CertificateAuthority = field(init=False)
    deployed: dict[str, _Deployed] = field(default_factory=dict)
    """Custom resources of the plan as CloudFormation holds them: id -> step and its properties."""
    watchdog_args_override: Callable[[list[str]], list[str]] | None = None
    """How a test changes the watchdog's arguments (shorter thresholds) before it is (re)started."""
    autoscaler_note: str = (
        "no cluster autoscaler runs in this scenario (test_scale_from_zero.py runs the real one); "
        "the test adds the nodes it would add"
    )
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    """Feature gates of the API server, controller manager and scheduler beyond their defaults (none
    by default: the tier runs what EKS runs; tests/cluster/dra.py says which gates its DRA scenarios
    turn on and why)."""
    runtime_config: tuple[str, ...] = ()
    """API versions the API server serves beyond its defaults (``--runtime-config``)."""
    node_monitor_grace_seconds: int = NODE_MONITOR_GRACE_SECONDS
    node_lease_seconds: int = 40
    """kwok's ``--node-lease-duration-seconds`` (it renews each node's Lease every quarter of it)."""
    kwok_stages: Path = KWOK_STAGES
    """What kwok does to nodes and pods; tests/cluster/bench_scale.py slows the heartbeat of thousands."""
    audit_policy: Mapping[str, Any] | None = None
    """An audit policy (audit.k8s.io/v1) for the API server, its JSON log at ``audit_log_path``;
    None: no audit log (tests/cluster/bench_scale.py counts requests per client with one)."""
    _volcano_values: str | None = None
    _watchdog_properties: str | None = None
    _control_args: dict[str, list[str]] = field(default_factory=dict)
    _real_nodes: RealNodes | None = None

    def __post_init__(self) -> None:
        self.processes = Processes(self.work_dir / "logs")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.egress = EgressProxy(str(self.work_dir / "egress.sock"))

    # ----- start and stop -------------------------------------------------------------------------

    def start(self) -> None:
        # A safety net for an interpreter that exits without running the fixture's finalizer.
        atexit.register(self.stop)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        pki = self.work_dir / "pki"
        self.ca = CertificateAuthority.create(pki, "cluster-ca")
        serving = self.ca.issue(
            "apiserver",
            common_name="kube-apiserver",
            dns=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
            # NODE_GATEWAY: where the real nodes and their pods reach it (tests/cluster/real_nodes.py).
            ips=["127.0.0.1", "10.100.0.1", NODE_GATEWAY],
        )
        admin = self.ca.issue("admin", common_name="cluster-test-admin", organizations=["system:masters"])
        # The API server's client certificate for kubelets (logs, exec, the pod proxy of real nodes).
        kubelet_client = self.ca.issue(
            "apiserver-kubelet-client",
            common_name="kube-apiserver-kubelet-client",
            organizations=["system:masters"],
        )
        kcm = self.ca.issue("kcm", common_name="system:kube-controller-manager")
        scheduler = self.ca.issue("scheduler", common_name="system:kube-scheduler")
        sa_keys = service_account_keys(pki)
        self.egress.start()

        etcd_port, etcd_peer = free_port(), free_port()
        etcd = self.processes.start(
            "etcd",
            [
                str(self.binaries.etcd),
                f"--data-dir={self.work_dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=default=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync",
            ],
        )
        egress_config = self.work_dir / "egress-selector.yaml"
        egress_config.write_text(
            json.dumps(
                {
                    "apiVersion": "apiserver.k8s.io/v1beta1",
                    "kind": "EgressSelectorConfiguration",
                    "egressSelections": [
                        {
                            "name": "cluster",
                            "connection": {
                                "proxyProtocol": "HTTPConnect",
                                "transport": {"uds": {"udsName": self.egress.socket_path}},
                            },
                        }
                    ],
                }
            )
        )
        self.api_port = free_port()
        apiserver = self.processes.start(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                # The address the real nodes reach the API server at, inside the session's node
                # network (tests/cluster/real_nodes.py). The `kubernetes` Service's endpoint is not
                # the API server's to write: the real nodes write it as their pods reach the API
                # server (API_ENDPOINT:443, as on EKS). Nothing in this machine's own network
                # namespace uses that Service.
                f"--advertise-address={NODE_GATEWAY}",
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.api_port}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={self.ca.cert}",
                f"--kubelet-client-certificate={kubelet_client.cert}",
                f"--kubelet-client-key={kubelet_client.key}",
                f"--kubelet-certificate-authority={self.ca.cert}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                # On top of the default chain (PodSecurity, ValidatingAdmissionPolicy, webhooks, ...):
                # what EKS enables besides (its documented list of admission controllers).
                "--enable-admission-plugins=NodeRestriction,ExtendedResourceToleration",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={sa_keys.cert}",
                f"--service-account-signing-key-file={sa_keys.key}",
                f"--egress-selector-config-file={egress_config}",
                "--allow-privileged=true",
                "--profiling=false",
                # etcd 3.5.1 answers no progress requests, so the watch cache refuses the streaming
                # lists of newer clients (kwok's client-go 0.36, Volcano's 0.35), which then relist
                # with backoff and see changes 20-30 s late; etcd's own watcher serves them.
                "--watch-cache=false",
                *self._gate_flags(),
                *([f"--runtime-config={','.join(self.runtime_config)}"] if self.runtime_config else []),
                *self._audit_flags(),
            ],
        )
        self.kubeconfig = self._write_kubeconfig("admin", client=admin)
        self.kubectl = Kubectl(self.binaries.kubectl, self.kubeconfig)
        wait_until(
            lambda: self.kubectl("get", "--raw", "/readyz", check=False, timeout=10).stdout.strip() == "ok",
            timeout=90,
            what="kube-apiserver /readyz",
            processes=self.processes,
            watch=[etcd, apiserver],
        )
        controller_manager = self.processes.start(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                *self._component_flags("kube-controller-manager", kcm),
                f"--service-account-private-key-file={sa_keys.key}",
                f"--root-ca-file={self.ca.cert}",
                "--use-service-account-credentials=true",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--node-monitor-grace-period={self.node_monitor_grace_seconds}s",
                f"--resource-quota-sync-period={QUOTA_RESYNC_SECONDS}s",
                *self._gate_flags(),
            ],
        )
        scheduler_process = self.processes.start(
            "kube-scheduler",
            [
                str(self.binaries.kube_scheduler),
                *self._component_flags("kube-scheduler", scheduler),
                *self._gate_flags(),
            ],
        )
        self._control_args = {
            process.name: list(process.args) for process in (apiserver, controller_manager, scheduler_process)
        }
        kwok = self.processes.start("kwok", self._kwok_args(KWOK_NODE_VALUE, "10.244.0.0/16"))
        # The default ServiceAccount of a new namespace comes from the controller manager: a proof it works.
        wait_until(
            lambda: (
                self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0
            ),
            timeout=90,
            what="the controller manager (the default ServiceAccount)",
            processes=self.processes,
            watch=[controller_manager, scheduler_process, kwok],
        )

    def _gate_flags(self) -> list[str]:
        if not self.feature_gates:
            return []
        gates = ",".join(f"{name}={str(on).lower()}" for name, on in sorted(self.feature_gates.items()))
        return [f"--feature-gates={gates}"]

    @property
    def audit_log_path(self) -> Path:
        return self.work_dir / "logs" / "audit.jsonl"

    def _audit_flags(self) -> list[str]:
        if self.audit_policy is None:
            return []
        policy = self.work_dir / "audit-policy.json"
        policy.write_text(json.dumps(self.audit_policy))
        # Batch mode: the API server buffers events and writes them off the request path.
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log_path}",
            "--audit-log-format=json",
            "--audit-log-mode=batch",
        ]

    def _kwok_args(self, node_value: str, cidr: str) -> list[str]:
        """kwok as the kubelet of every node annotated ``kwok.x-k8s.io/node=<node_value>`` (and of
        their pods): it renews their Leases and writes their status by tests/cluster/kwok_stages.yaml."""
        return [
            str(self.binaries.kwok),
            f"--kubeconfig={self.kubeconfig}",
            f"--config={self.kwok_stages}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_KEY}={node_value}",
            f"--node-lease-duration-seconds={self.node_lease_seconds}",
            f"--server-address=127.0.0.1:{free_port()}",
            f"--cidr={cidr}",
        ]

    def start_kubelet(self, node_value: str) -> Process:
        """A kwok of its own for the nodes annotated ``kwok.x-k8s.io/node=<node_value>`` (the
        session's kwok manages only ``fake``): killing it is a node whose kubelet died, its Lease
        and status no longer renewed and its pods left as they were (tests/cluster/test_recovery.py)."""
        return self.processes.start(f"kwok-{node_value}", self._kwok_args(node_value, "10.245.0.0/16"))

    def _component_flags(self, name: str, client: KeyPair) -> list[str]:
        kubeconfig = self._write_kubeconfig(name, client=client)
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--leader-elect=false",
        ]

    def _write_kubeconfig(
        self, name: str, *, client: KeyPair | None = None, token: str | None = None
    ) -> Path:
        user: dict[str, str] = (
            {"client-certificate": str(client.cert), "client-key": str(client.key)}
            if client is not None
            else {"token": token or ""}
        )
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": f"https://127.0.0.1:{self.api_port}",
                        "certificate-authority": str(self.ca.cert),
                    },
                }
            ],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}],
            "current-context": name,
        }
        path = self.work_dir / "kubeconfigs" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config))
        path.chmod(0o600)
        return path

    @contextlib.contextmanager
    def stopped(self, name: str) -> Iterator[None]:
        """The process ``name`` stopped for the block, then started again with its arguments (and the
        environment every process gets: what Volcano's processes start with)."""
        process = self.processes.get(name)
        self.processes.stop(name)
        try:
            yield
        finally:
            self.processes.start(name, process.args)

    @contextlib.contextmanager
    def reconfigured(
        self, *, feature_gates: Mapping[str, bool], runtime_config: Sequence[str] = ()
    ) -> Iterator[None]:
        """The API server, controller manager and scheduler restarted with ``feature_gates`` (and the
        API server with ``runtime_config``) for the block, then restarted with this plane's own.
        etcd keeps every object; the other processes' clients reconnect (what a control plane
        upgrade looks like to them)."""
        saved = (dict(self.feature_gates), tuple(self.runtime_config))
        self._restart_control(feature_gates, runtime_config)
        try:
            yield
        finally:
            self._restart_control(*saved)

    def _restart_control(self, feature_gates: Mapping[str, bool], runtime_config: Sequence[str]) -> None:
        self.feature_gates, self.runtime_config = dict(feature_gates), tuple(runtime_config)
        flags = ("--feature-gates=", "--runtime-config=")
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver"):
            self.processes.stop(name)
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            args = [a for a in self._control_args[name] if not a.startswith(flags)] + self._gate_flags()
            if name == "kube-apiserver" and self.runtime_config:
                args.append(f"--runtime-config={','.join(self.runtime_config)}")
            self.processes.start(name, args)
            if name == "kube-apiserver":
                wait_until(
                    lambda: (
                        self.kubectl("get", "--raw", "/readyz", check=False, timeout=10).stdout.strip()
                        == "ok"
                    ),
                    timeout=90,
                    what="kube-apiserver /readyz after its restart",
                    processes=self.processes,
                )

    @property
    def real_nodes(self) -> RealNodes:
        """The real nodes (kubelet, containerd, runc) of this control plane, started on first use."""
        if self._real_nodes is None:
            self._real_nodes = RealNodes(self, find_node_binaries())
        return self._real_nodes

    def node_kubeconfig(self, name: str, client: KeyPair, host: str) -> Path:
        """A kubeconfig that reaches the API server at ``host`` (a real node's way to it)."""
        path = self._write_kubeconfig(name, client=client)
        config = json.loads(path.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://{host}:{self.api_port}"
        path.write_text(json.dumps(config))
        return path

    def stop(self) -> None:
        if self._real_nodes is not None:
            with contextlib.suppress(Exception):
                self._real_nodes.stop()
        self.processes.stop_all()
        with contextlib.suppress(Exception):
            self.egress.stop()

    def report(self) -> str:
        return self.processes.report()

    # ----- helpers for tests ----------------------------------------------------------------------

    def impersonate(self, user: str, groups: Iterable[str] = ()) -> Kubectl:
        """kubectl as ``user`` in ``groups`` (and ``system:authenticated``), through impersonation."""
        return Kubectl(self.binaries.kubectl, self.kubeconfig, (user, (*groups, "system:authenticated")))

    def user_kubeconfig(self, user: str, groups: Iterable[str] = ()) -> Path:
        """A kubeconfig of ``user`` in ``groups`` with a client certificate of the cluster's CA (as an
        authenticator names a person), for a program with its own API client (the TorchX CLI)."""
        pair = self.ca.issue(f"user-{user}", common_name=user, organizations=list(groups))
        return self._write_kubeconfig(f"user-{user}", client=pair)

    def kube_api_environment(self, token_file: Path) -> dict[str, str]:
        """What points an in-cluster program's API client (cluster_programs/kube_api.py) at this
        API server with ``token_file``'s token, in place of the pod's service and mounted token."""
        return {
            "KUBE_API_URL": f"https://127.0.0.1:{self.api_port}",
            "KUBE_API_TOKEN_FILE": str(token_file),
            "KUBE_API_CA_FILE": str(self.ca.cert),
        }

    def service_account_token(self, namespace: str, name: str, *, hours: int = 24) -> str:
        return self.kubectl("create", "token", name, "-n", namespace, f"--duration={hours}h").stdout.strip()

    def as_service_account(self, namespace: str, name: str) -> Kubectl:
        """kubectl with a real token of that ServiceAccount (not impersonation)."""
        return self.with_token(f"sa-{namespace}-{name}", self.service_account_token(namespace, name))

    def with_token(self, name: str, token: str) -> Kubectl:
        """kubectl that authenticates with ``token`` (a service account's, bound to a pod or not)."""
        return Kubectl(self.binaries.kubectl, self._write_kubeconfig(name, token=token))

    def wait_for(self, probe: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.5) -> Any:
        return wait_until(probe, timeout=timeout, what=what, interval=interval, processes=self.processes)

    def create(self, objects: Iterable[Mapping[str, Any]]) -> None:
        self.kubectl("create", "-f", "-", input="".join(json.dumps(obj) for obj in objects))

    def add_nodes(self, nodes: Iterable[Mapping[str, Any]], *, node_check: bool = True) -> list[str]:
        """Simulated nodes (kwok runs them), each with the CSINode the FSx CSI driver would register;
        with ``node_check``, each registered with the node check's startup taint then passes the
        check (``pass_node_check``), as a healthy Trainium node does before any gang lands on it."""
        created = list(nodes)
        self.create([*created, *(csi_node(node["metadata"]["name"]) for node in created)])
        names = [str(node["metadata"]["name"]) for node in created]
        if node_check:
            self.pass_node_check(
                [
                    str(node["metadata"]["name"])
                    for node in created
                    if any(t["key"] == NODE_CHECK_TAINT_KEY for t in node.get("spec", {}).get("taints", []))
                ]
            )
        return names

    def node_check_pod(self, node: str) -> dict[str, Any]:
        """The node check's pod on ``node`` (its DaemonSet's), once kwok runs it."""
        daemon_set = self.kubectl.json("get", "daemonset", NODE_CHECK_NAME, "-n", NODE_CHECK_NAMESPACE)
        selector = ",".join(f"{k}={v}" for k, v in daemon_set["spec"]["selector"]["matchLabels"].items())

        def running() -> dict[str, Any] | None:
            pods = self.kubectl.json(
                "get", "pods", "-n", NODE_CHECK_NAMESPACE, "-l", selector,
                f"--field-selector=spec.nodeName={node}",
            )["items"]  # fmt: skip
            live = [
                p
                for p in pods
                if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]
            ]
            return live[0] if live else None

        found: dict[str, Any] = self.wait_for(running, timeout=60, what=f"the node check's pod on {node}")
        return found

    def node_check_program(self) -> tuple[Path, dict[str, str]]:
        """The node check's ConfigMap written to a directory (as the pod mounts it) and the plain
        environment of its DaemonSet's container."""
        daemon_set = self.kubectl.json("get", "daemonset", NODE_CHECK_NAME, "-n", NODE_CHECK_NAMESPACE)
        pod = daemon_set["spec"]["template"]["spec"]
        [container] = pod["containers"]
        self._local_args("node-check", NODE_CHECK_NAMESPACE, pod, container)
        [mount] = container["volumeMounts"]
        directory = self.work_dir / "mounts" / "node-check" / mount["name"]
        return directory, {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}

    def node_fence_program(self) -> tuple[list[str], dict[str, str]]:
        """The fence's Deployment as rendered and applied: its command with the mounted program
        written locally, and the plain environment of its container."""
        deployment = self.kubectl.json("get", "deployment", NODE_FENCE_NAME, "-n", NODE_CHECK_NAMESPACE)
        pod = deployment["spec"]["template"]["spec"]
        [container] = pod["containers"]
        args = self._local_args(NODE_FENCE_NAME, NODE_CHECK_NAMESPACE, pod, container)
        return args, {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}

    def node_check_token(self, node: str) -> Path:
        """A token of the node check's service account bound to its pod on ``node``: the API server
        then names the node in the token's user (what the node-check policy reads)."""
        pod = self.node_check_pod(node)
        token = self.kubectl(
            "create", "token", pod["spec"]["serviceAccountName"], "-n", NODE_CHECK_NAMESPACE,
            "--bound-object-kind=Pod", f"--bound-object-name={pod['metadata']['name']}",
            f"--bound-object-uid={pod['metadata']['uid']}", "--duration=1h",
        ).stdout.strip()  # fmt: skip
        path = self.work_dir / "node-check-tokens" / node
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(token)
        return path

    def pass_node_check(self, nodes: Iterable[str]) -> None:
        """The node check's writes on each of ``nodes`` after its tools passed: its condition, then
        the startup taint lifted, by the check's own program and its pod's token
        (tests/cluster/node_check_pass.py); a refusal by the API server fails the test."""
        names = list(nodes)
        if not names:
            return
        directory, environment = self.node_check_program()
        for node in names:
            token = self.node_check_token(node)
            result = subprocess.run(
                [sys.executable, str(NODE_CHECK_PASS), str(directory)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                env={**os.environ, **environment, "NODE_NAME": node, **self.kube_api_environment(token)},
            )
            if result.returncode != 0:
                raise AssertionError(
                    f"the node check's pass on {node} was refused:\n{result.stderr}{result.stdout}"
                )

    def remove_nodes(self, names: Iterable[str]) -> None:
        for name in names:
            self.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")
            self.kubectl("delete", "csinode", name, "--ignore-not-found", "--wait=false")

    def policy_type_checking(self) -> tuple[list[str], dict[str, list[Any]]]:
        """Every ValidatingAdmissionPolicy once the API server has type-checked its current
        generation, and the expression warnings it found (status.typeChecking), by policy."""

        def checked() -> list[dict[str, Any]] | None:
            found: list[dict[str, Any]] = self.kubectl.json("get", "validatingadmissionpolicies")["items"]
            done = all(
                p.get("status", {}).get("observedGeneration") == p["metadata"]["generation"]
                and "typeChecking" in p.get("status", {})
                for p in found
            )
            return found if done else None

        policies: list[dict[str, Any]] = self.wait_for(checked, timeout=60, what="every policy type-checked")
        warnings = {
            p["metadata"]["name"]: p["status"]["typeChecking"]["expressionWarnings"]
            for p in policies
            if p["status"]["typeChecking"].get("expressionWarnings")
        }
        return [p["metadata"]["name"] for p in policies], warnings

    def stored_differences(self, plan: KubernetesLayerPlan) -> dict[str, list[str]]:
        """For each applied object of ``plan``, where its rendering says what the server did not
        store (``stored_differences``): why a second apply reports it ``configured``."""
        found: dict[str, list[str]] = {}
        for step in plan.applied():
            if not isinstance(step, ManifestSet):
                continue
            for manifest in step.manifests:
                metadata = manifest["metadata"]
                group = manifest["apiVersion"].split("/")[0] if "/" in manifest["apiVersion"] else ""
                resource = f"{manifest['kind'].lower()}.{group}".rstrip(".")
                args = ["get", resource, metadata["name"]]
                if "namespace" in metadata:
                    args += ["-n", metadata["namespace"]]
                result = self.kubectl(*args, "-o", "json", check=False)
                if result.returncode != 0:
                    found[f"{step.name}: {resource}/{metadata['name']}"] = [result.stderr.strip()]
                    continue
                differences = stored_differences(manifest, json.loads(result.stdout))
                if differences:
                    found[f"{step.name}: {resource}/{metadata['name']}"] = differences
        return found

    # ----- the plan, as the kubectl handler applies it ----------------------------------------------

    def apply_plan(
        self, plan: KubernetesLayerPlan, *, update_all: bool = False, concurrent: bool = False
    ) -> ApplyReport:
        """Every applied step, as CloudFormation drives the handler: a new custom resource is a
        Create, one whose properties changed an Update (``update_all``: every step, as if each had
        changed), one no longer in the plan a Delete, after the rest.

        By default one step at a time in deploy order, which every order CloudFormation may choose
        satisfies. ``concurrent``: a step starts as soon as the steps it names in ``after`` are done,
        as CloudFormation starts a resource once its dependencies are (the stack's dependencies on
        the nodes and add-ons have no counterpart here); the report lists steps as they end."""
        report = ApplyReport()
        wanted: dict[str, ManifestSet | HelmRelease | ReadinessGate] = {}
        for step in plan.applied():
            identity = getattr(step, "identity", None)
            wanted[f"{step.name}-{identity}" if identity else step.name] = step
        if concurrent:
            self._apply_concurrently(wanted, update_all, report)
        else:
            for resource_id, step in wanted.items():
                report.steps.append(self._apply_step(resource_id, step, update_all))
        for resource_id in [r for r in self.deployed if r not in wanted]:
            gone = self.deployed.pop(resource_id).step
            output = self._delete_step(resource_id, gone)
            report.steps.append(StepResult(gone.name, "Delete", output))
            if gone.name == gang_watchdog.STEP:
                # Its Deployment is gone: so is the pod the local process stands for.
                self.processes.stop("gang-watchdog")
                self._watchdog_properties = None
        return report

    def _apply_step(
        self, resource_id: str, step: ManifestSet | HelmRelease | ReadinessGate, update_all: bool
    ) -> StepResult:
        properties = _properties(step)
        previous = self.deployed.get(resource_id)
        if previous is None:
            action = "Create"
        elif previous.properties != properties or update_all:
            action = "Update"
        else:
            return StepResult(step.name, "Unchanged")
        started = time.monotonic()
        output = self._run_step(resource_id, step, action)
        self.deployed[resource_id] = _Deployed(step, properties)
        self._after_step(step)
        return StepResult(step.name, action, output, time.monotonic() - started)

    def _apply_concurrently(
        self,
        wanted: Mapping[str, ManifestSet | HelmRelease | ReadinessGate],
        update_all: bool,
        report: ApplyReport,
    ) -> None:
        """Each step once the steps of its ``after`` are done; the first step that fails stops the
        rest from starting (those running finish), and its error is raised."""
        done: set[str] = set()
        pending = dict(wanted)
        with ThreadPoolExecutor(max_workers=APPLY_WORKERS) as pool:
            running: dict[Future[StepResult], str] = {}
            while pending or running:
                for resource_id, step in list(pending.items()):
                    if all(name in done for name in step.after):
                        running[pool.submit(self._apply_step, resource_id, step, update_all)] = step.name
                        del pending[resource_id]
                if not running:
                    raise AssertionError(f"steps wait for steps that never end: {', '.join(pending)}")
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    done.add(running.pop(future))
                    report.steps.append(future.result())

    def _run_step(
        self, resource_id: str, step: ManifestSet | HelmRelease | ReadinessGate, action: str
    ) -> str:
        if isinstance(step, ManifestSet):
            manifest = self._manifest_file(resource_id, step)
            args = ["apply", "-f", str(manifest)]
            if action == "Update":
                args += ["--prune", "-l", _prune_label(resource_id)]
            result = self.kubectl(*args, check=False, timeout=300)
            if result.returncode != 0:
                raise AssertionError(
                    f"step {step.name} ({action}): kubectl apply refused:\n{result.stderr}{result.stdout}"
                )
            return result.stdout
        if isinstance(step, HelmRelease):
            return self._helm_upgrade(resource_id, step)
        return self._wait_gate(step)

    def _manifest_file(self, resource_id: str, step: ManifestSet) -> Path:
        label = _prune_label(resource_id)
        objects = []
        for manifest in step.manifests:
            obj = json.loads(json.dumps(manifest))
            obj.setdefault("metadata", {}).setdefault("labels", {})
            obj["metadata"]["labels"] = {label: "", **obj["metadata"]["labels"]}
            objects.append(obj)
        path = self.work_dir / "manifests" / f"{resource_id}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        # As the handler writes it: a stream of JSON objects.
        path.write_text("".join(json.dumps(obj) for obj in objects))
        return path

    def _helm_upgrade(self, resource_id: str, step: HelmRelease) -> str:
        if step.chart_directory is None:
            raise AssertionError(f"{step.name}: only charts kept in the repository can be installed here")
        values = self.work_dir / "helm" / f"{resource_id}.values.yaml"
        values.parent.mkdir(parents=True, exist_ok=True)
        values.write_text(json.dumps(dict(step.values), indent=2))
        helm_home = self.work_dir / "helm" / "home"
        command = [
            str(self.binaries.helm), "upgrade", step.release, str(repository_path(step.chart_directory)),
            "--install", "--create-namespace", "--values", str(values), "--namespace", step.namespace,
            *(["--wait"] if step.wait else []), "--timeout", f"{step.timeout_minutes * 60}s",
            "--kubeconfig", str(self.kubeconfig),
        ]  # fmt: skip
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(helm_home / "cache"),
            "HELM_CONFIG_HOME": str(helm_home / "config"),
            "HELM_DATA_HOME": str(helm_home / "data"),
            **CLIENT_ENVIRONMENT,
        }
        if step.name == "volcano":
            # The chart's pre-install hook Job writes the webhook's certificate Secret; kwok finishes
            # that Job's pod without running it, so the harness writes the Secret the script would.
            self._volcano_certificates(step)
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=env,
            timeout=step.timeout_minutes * 60 + 30,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(
                f"helm upgrade {step.release} refused:\n{result.stderr}{result.stdout}\n{self.report()}"
            )
        return result.stdout

    def _wait_gate(self, gate: ReadinessGate) -> str:
        def probe() -> str | None:
            result = self.kubectl(
                "get", "-n", gate.namespace, gate.object_type, gate.object_name,
                f"-o=jsonpath='{{{gate.json_path}}}'", check=False,
            )  # fmt: skip
            value = result.stdout.strip()[1:-1] if result.returncode == 0 else ""
            return value or None

        return str(
            wait_until(
                probe,
                timeout=gate.timeout_minutes * 60,
                what=f"readiness gate {gate.name} ({gate.object_type}/{gate.object_name} {gate.json_path})",
                interval=GATE_INTERVAL_SECONDS,
                processes=self.processes,
            )
        )

    def _delete_step(self, resource_id: str, step: ManifestSet | HelmRelease | ReadinessGate) -> str:
        """Deletes are best effort in the handler: an error is logged, not raised."""
        if isinstance(step, ManifestSet):
            manifest = self.work_dir / "manifests" / f"{resource_id}.yaml"
            result = self.kubectl("delete", "-f", str(manifest), check=False, timeout=300)
            return result.stdout + result.stderr
        if isinstance(step, HelmRelease):
            result = subprocess.run(
                [str(self.binaries.helm), "uninstall", step.release, "--namespace", step.namespace,
                 "--kubeconfig", str(self.kubeconfig)],
                capture_output=True, text=True, check=False, timeout=600,
            )  # fmt: skip
            return result.stdout + result.stderr
        return ""

    def _after_step(self, step: ManifestSet | HelmRelease | ReadinessGate) -> None:
        if isinstance(step, HelmRelease) and step.name == "volcano":
            values = json.dumps(dict(step.values), sort_keys=True)
            if values != self._volcano_values:
                self._start_volcano(step)
                self._volcano_values = values
        if isinstance(step, ManifestSet) and step.name == gang_watchdog.STEP:
            properties = _properties(step)
            if properties != self._watchdog_properties:
                self.start_watchdog()
                self._watchdog_properties = properties

    # ----- Volcano as local processes -------------------------------------------------------------

    def _volcano_certificates(self, release: HelmRelease) -> None:
        namespace = release.namespace
        secret = "volcano-admission-secret"
        service = f"{release.release}-admission-service"
        self.kubectl("create", "namespace", namespace, check=False)
        if self.kubectl("get", "secret", secret, "-n", namespace, check=False).returncode == 0:
            return
        ca = CertificateAuthority.create(self.work_dir / "volcano-pki", "volcano-admission-ca")
        serving = ca.issue(
            "admission",
            common_name=f"{service}.{namespace}.svc",
            dns=[service, f"{service}.{namespace}", f"{service}.{namespace}.svc"],
        )
        self.kubectl(
            "create", "secret", "generic", secret, "-n", namespace,
            f"--from-file=tls.crt={serving.cert}", f"--from-file=tls.key={serving.key}",
            f"--from-file=ca.crt={ca.cert}",
        )  # fmt: skip

    def _start_volcano(self, release: HelmRelease) -> None:
        namespace = release.namespace
        binaries = dict(
            zip(
                VOLCANO_IMAGE_NAMES,
                (
                    self.binaries.volcano_webhook_manager,
                    self.binaries.volcano_controller_manager,
                    self.binaries.volcano_scheduler,
                ),
                strict=True,
            )
        )
        deployments = self.kubectl.json("get", "deployments", "-n", namespace)["items"]
        started: list[Process] = []
        for deployment in deployments:
            pod = deployment["spec"]["template"]["spec"]
            for container in pod["containers"]:
                image = container["image"].rsplit(":", 1)[0]
                binary = next((path for name, path in binaries.items() if image.endswith(name)), None)
                if binary is None:
                    continue
                name = f"volcano-{deployment['metadata']['name'].removeprefix(release.release + '-')}"
                self.processes.stop(name)
                args = self._local_args(name, namespace, pod, container)
                account = pod.get("serviceAccountName", "default")
                kubeconfig = self._write_kubeconfig(
                    f"{name}-sa", token=self.service_account_token(namespace, account)
                )
                args += [f"--kubeconfig={kubeconfig}"]
                if image.endswith("vc-webhook-manager"):
                    webhook_port = free_port()
                    args = [a for a in args if not a.startswith("--port=")]
                    args += [f"--port={webhook_port}", "--listen-address=127.0.0.1"]
                    service = self.kubectl.json(
                        "get", "service", f"{release.release}-admission-service", "-n", namespace
                    )
                    for port in service["spec"]["ports"]:
                        self.egress.add_route(service["spec"]["clusterIP"], int(port["port"]), webhook_port)
                args += _loopback_addresses(image)
                started.append(self.processes.start(name, [str(binary), *args]))
        if len(started) != len(VOLCANO_IMAGE_NAMES):
            raise AssertionError(
                f"expected one Deployment per Volcano image {VOLCANO_IMAGE_NAMES} in {namespace}, "
                f"started {[p.name for p in started]}"
            )
        time.sleep(1)
        dead = [p.name for p in started if not p.alive()]
        if dead:
            raise AssertionError(f"Volcano processes exited at start: {dead}\n{self.report()}")

    def _local_args(
        self, name: str, namespace: str, pod: Mapping[str, Any], container: Mapping[str, Any]
    ) -> list[str]:
        """The container's arguments with every mounted ConfigMap or Secret written to a local
        directory and each path under a mount rewritten to it."""
        volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts", []):
            volume = volumes.get(mount["name"], {})
            local = self.work_dir / "mounts" / name / mount["name"]
            local.mkdir(parents=True, exist_ok=True)
            if "configMap" in volume:
                data = self.kubectl.json(
                    "get", "configmap", volume["configMap"]["name"], "-n", namespace
                ).get("data", {})
                for key, value in data.items():
                    (local / key).write_text(value)
            elif "secret" in volume:
                data = self.kubectl.json(
                    "get", "secret", volume["secret"]["secretName"], "-n", namespace
                ).get("data", {})
                for key, value in data.items():
                    (local / key).write_bytes(base64.b64decode(value))
            else:
                continue
            mounts[mount["mountPath"].rstrip("/")] = local
        args = [*container.get("command", [])[1:], *container.get("args", [])]
        rewritten = []
        for arg in args:
            local_arg = arg
            for mount_path, local in sorted(mounts.items(), key=lambda item: -len(item[0])):
                if mount_path + "/" in arg:
                    local_arg = arg.replace(mount_path + "/", f"{local}/")
                    break
            rewritten.append(local_arg)
        return rewritten

    # ----- the gang watchdog ------------------------------------------------------------------------

    def start_watchdog(self) -> Process:
        """The watchdog program of the ``gang-watchdog`` step's ConfigMap, with its Deployment's
        arguments (``watchdog_args_override`` applied) and its service account's own token."""
        namespace = _namespace_of(gang_watchdog.NAME, self.kubectl)
        deployment = self.kubectl.json("get", "deployment", gang_watchdog.NAME, "-n", namespace)
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]
        local = self._local_args("gang-watchdog", namespace, pod, container)
        command = [container["command"][0], *local] if container.get("command") else local
        script = next(arg for arg in command if arg.endswith(".py"))
        args = command[command.index(script) + 1 :]
        if self.watchdog_args_override is not None:
            args = self.watchdog_args_override(args)
        token_file = self.work_dir / "gang-watchdog.token"
        token_file.write_text(self.service_account_token(namespace, pod["serviceAccountName"]))
        self.processes.stop("gang-watchdog")
        env = {
            **os.environ,
            **{e["name"]: e["value"] for e in container.get("env", []) if "value" in e},
            **self.kube_api_environment(token_file),
        }
        return self.processes.start("gang-watchdog", [sys.executable, script, *args], env=env)


def shortened_watchdog_args(
    args: Sequence[str], *, threshold_minutes: float, interval_seconds: float, stuck_minutes: float
) -> list[str]:
    """The watchdog's Deployment arguments with its threshold, pass interval and stuck-run guard set
    (the product's 15 minutes, 60 s and 10 minutes are too long for a test). The ceiling of a run's
    own limit (``--stuck-max-minutes``, which the watchdog refuses below ``--stuck-minutes``) is raised
    to the guard's limit where that is higher."""
    ceiling = next((float(a.split("=", 1)[1]) for a in args if a.startswith("--stuck-max-minutes=")), 0.0)
    changed = ("--threshold-minutes", "--interval-seconds", "--stuck-minutes", "--stuck-max-minutes")
    return [
        *(a for a in args if not a.startswith(changed)),
        f"--threshold-minutes={threshold_minutes}",
        f"--interval-seconds={interval_seconds}",
        f"--stuck-minutes={stuck_minutes}",
        f"--stuck-max-minutes={max(ceiling, stuck_minutes):g}",
    ]


def _properties(step: ManifestSet | HelmRelease | ReadinessGate) -> str:
    if isinstance(step, ManifestSet):
        return json.dumps(step.manifests, sort_keys=True, default=str)
    if isinstance(step, HelmRelease):
        return json.dumps(
            [step.chart, step.version, step.values, step.namespace, step.release], sort_keys=True, default=str
        )
    return json.dumps([step.object_type, step.object_name, step.json_path, step.namespace])


def _prune_label(resource_id: str) -> str:
    return PRUNE_LABEL_PREFIX + "c8" + hashlib.sha1(resource_id.encode()).hexdigest()[:40]


def _loopback_addresses(image: str) -> list[str]:
    """Volcano's health and metrics listeners default to every interface (``:11251``, ``:8080``...):
    here each gets a port of its own on 127.0.0.1."""
    if image.endswith("vc-webhook-manager"):
        return [f"--healthz-address=127.0.0.1:{free_port()}"]
    return [f"--healthz-address=127.0.0.1:{free_port()}", f"--listen-address=127.0.0.1:{free_port()}"]


def _namespace_of(deployment: str, kubectl: Kubectl) -> str:
    found = kubectl.json(
        "get", "deployments", "--all-namespaces", f"--field-selector=metadata.name={deployment}"
    )
    items = found["items"]
    if len(items) != 1:
        raise AssertionError(f"expected one Deployment {deployment}, found {len(items)}")
    return str(items[0]["metadata"]["namespace"])


def decode_secret(data: Mapping[str, str]) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in data.items()}


__all__ += ["decode_secret"]


def objects_of(manifests: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [m for m in manifests if m.get("kind") == kind]


def stored_differences(rendered: Any, stored: Any, path: str = "") -> list[str]:
    """Where a rendered object says something its stored form does not: a field the server dropped
    (an empty list, ``""``) or stores otherwise (a default filled in, a quantity normalized).
    Fields only the server has (status, defaults the rendering leaves out) are not differences."""
    if isinstance(rendered, dict) and isinstance(stored, dict):
        found = []
        for key, value in rendered.items():
            where = f"{path}.{key}"
            if key not in stored:
                found.append(f"{where}: rendered {json.dumps(value)}, not stored")
            else:
                found += stored_differences(value, stored[key], where)
        return found
    if isinstance(rendered, list) and isinstance(stored, list):
        if len(rendered) != len(stored):
            return [f"{path}: rendered {len(rendered)} items, stored {len(stored)}"]
        return [
            d
            for index, (r, s) in enumerate(zip(rendered, stored, strict=True))
            for d in stored_differences(r, s, f"{path}[{index}]")
        ]
    if rendered != stored:
        return [f"{path}: rendered {json.dumps(rendered)}, stored {json.dumps(stored)}"]
    return []
