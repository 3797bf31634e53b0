"""What a team's Volcano Job may make Volcano do, and how much of the shared machinery it may take.

Rules of the team admission policy ``trainium-team-volcano-jobs`` (k8s_charts/teams/tenant_admission.py)
that only a Job has (issue 34):

- **Volcano acts only within the team's rights.** Volcano's job controller creates what a Job asks
  for with its own, cluster-wide rights: a ``spec.volumes[].volumeClaim`` becomes a
  PersistentVolumeClaim of any spec (``createJobIOIfNotExist``, pkg/controllers/job/
  job_controller_actions.go), though the team may create no claim; its ``ray`` plugin a Service,
  ``ssh`` a Secret. So a Job names in ``spec.volumes`` only the team's own claim, and uses only the
  ``env`` and ``svc`` plugins (svc's objects are named after the Job and owned by it; a second
  policy holds the controller to objects its Jobs own: k8s_charts/addons/volcano_controller_admission.py).
- **A team's load stays the team's.** One Job's replicas fit the team's pod quota beside its etcd
  and its Neuron chips the team's queue (a pod the quota refuses is a failed sync Volcano retries);
  its free text (annotations, labels, images, commands, arguments, environment) is bounded
  (``JOB_TEXT_LIMIT``: thirty Jobs of 1 MiB each grew etcd by 36 MiB). The count of Jobs is the
  namespace's quota (k8s_charts/teams/team_quota.py).
- **Overrides stay within the platform's bounds.** ``maxRetry`` (each restart spends Trainium time)
  at most what ``runs[].retries`` allows; the stuck-run guard's annotation a whole number of
  minutes up to ``autoscaler.stuck_run_max_minutes`` (the guard clamps it too:
  cluster_programs/stuck_runs.py).
- **Names the stack applies are the stack's.** A team member may not create a Job under an applied
  run's name pattern ``<run>-<8 hex digits>`` (after the run ended, its deleted Job's name was free,
  and the next deploy's apply failed on Volcano's update rule); and an update that carries the
  stack's apply label (``aws.cdk.eks/prune-*``) onto a Job the stack did not apply is refused with
  a message naming the Job, when and by which clients it was created, so a deploy meeting a squatted
  name fails on that line instead of Volcano's.

CEL has no ``sum``: Kubernetes' list library adds one (``list.sum()``, k8s.io/apiserver
pkg/cel/library/lists.go, in every Kubernetes version this project supports), and ``join()``
comes from cel-go's strings extension, which the API server enables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cluster_facts.job_text import JOB_TEXT_LIMIT
from cluster_facts.kubernetes_names import (
    CDK_PRUNE_LABEL_PREFIX,
    NEURON_RESOURCE,
    STUCK_MINUTES_ANNOTATION,
    team_rbac_group,
)
from cluster_facts.volcano_retries import MAX_RESTARTS, MAX_RETRY
from k8s_charts.shared.admission_policy import cel_list, cel_string, refuse

__all__ = ["JOB_TEXT_LIMIT", "JobMessage", "applied_name_pattern", "job_rules", "job_variables"]

_PLUGINS = ("env", "svc")
# svc's only flags (Go's flag package: one or two dashes, an optional boolean value).
_SVC_FLAGS = r"^--?(publish-not-ready-addresses|disable-network-policy)(=(true|false))?$"
# A quantity a Neuron limit may be written as and still be counted: a whole number.
_WHOLE = r"^[0-9]{1,6}$"
_TOO_MANY = 1_000_000


class JobMessage:
    PLUGINS = (
        f"a team's Volcano Jobs use only the plugins {' and '.join(_PLUGINS)} (svc with no flag but "
        "--publish-not-ready-addresses and --disable-network-policy): the others make Volcano create "
        "objects the team may not (ssh a Secret, ray a Service)"
    )
    CLAIMS = (
        "a team's Volcano Job's spec.volumes may only name the team's own claim (volumeClaimName), "
        "never a volumeClaim for Volcano to create: the team may create no PersistentVolumeClaim"
    )
    REPLICAS = (
        "a team's Volcano Job's replicas (over all its tasks) must fit the team's pod quota beside its "
        "etcd: a pod the quota refuses makes Volcano's controller retry the Job"
    )
    DEVICES = (
        f"a team's Volcano Job may ask for at most its queue's Trainium chips ({NEURON_RESOURCE} "
        "limits times replicas, over all its tasks)"
    )
    SIZE = (
        f"a team's Volcano Job carries at most {JOB_TEXT_LIMIT} characters of annotations, labels, "
        "images, commands, arguments and environment (its own and its pod templates')"
    )
    RETRIES = (
        f"a team's Volcano Job's maxRetry, and each task's, is at most {MAX_RETRY} "
        f"({MAX_RESTARTS} whole-gang restarts, the most runs[].retries allows)"
    )
    APPLIED_NAME = (
        "a team member may not create a Volcano Job under the name of a run the stack applies in this "
        "namespace (<run>-<8 hex digits>): choose another name"
    )
    ADOPTED = (
        "this Volcano Job was not created by the stack: the stack applies its runs only over Jobs it "
        "created; delete it and deploy again"
    )

    @staticmethod
    def stuck_minutes(ceiling: int) -> str:
        return (
            f"annotation {STUCK_MINUTES_ANNOTATION} is a whole number of minutes from 1 to {ceiling} "
            "(autoscaler.stuck_run_max_minutes): no run holds Trainium nodes without progress longer"
        )


def applied_name_pattern(runs: Sequence[str]) -> str:
    """The RE2 pattern of the Job names the stack gives ``runs`` (k8s_charts/runs/training_run.py ``run_id``)."""
    return f"^({'|'.join(sorted(runs))})-[0-9a-f]{{8}}$" if runs else ""


def _map(entries: Mapping[str, str]) -> str:
    """A CEL map of namespace to an expression (already CEL)."""
    return "{" + ", ".join(f"{cel_string(key)}: {value}" for key, value in entries.items()) + "}"


def _per_team(name: str, entries: Mapping[str, str], default: str) -> dict[str, str]:
    table = _map(entries)
    return {"name": name, "expression": f"variables.ns in {table} ? {table}[variables.ns] : {default}"}


def job_variables(
    *,
    claims: Mapping[str, Sequence[str]],
    pod_budgets: Mapping[str, int],
    neuron_devices: Mapping[str, int],
    applied_runs: Mapping[str, Sequence[str]],
) -> list[dict[str, str]]:
    """The Job-only variables, per team namespace (``variables.ns``); an unknown namespace gets none."""
    patterns = {ns: cel_string(applied_name_pattern(runs)) for ns, runs in applied_runs.items() if runs}
    tasks = "(has(object.spec.tasks) ? object.spec.tasks : [])"
    replicas = "(has(t.replicas) ? int(t.replicas) : 0)"
    return [
        _per_team("claims", {ns: cel_list(names) if names else "[]" for ns, names in claims.items()}, "[]"),
        _per_team("podBudget", {ns: str(n) for ns, n in pod_budgets.items()}, "0"),
        _per_team("neuronDevices", {ns: str(n) for ns, n in neuron_devices.items()}, "0"),
        _per_team("appliedNames", patterns, "''"),
        {
            "name": "member",
            "expression": "has(request.userInfo.groups) && request.userInfo.groups.exists(g,"
            f" g.startsWith({cel_string(team_rbac_group(''))}))",
        },
        {"name": "replicas", "expression": f"{tasks}.map(t, {replicas})"},
        {"name": "chips", "expression": f"{tasks}.map(t, {replicas} * {_chips_of_pod('t')})"},
        {"name": "text", "expression": _text()},
    ]


def _chips_of_pod(t: str) -> str:
    """CEL: the Trainium chips one pod of task ``t`` asks for (its containers' limits)."""
    limits = "c.resources.limits"
    key = cel_string(NEURON_RESOURCE)
    value = f"{limits}[{key}]"
    amount = (
        f"(type({value}) == int ? {value}"
        f" : (string({value}).matches({cel_string(_WHOLE)}) ? int(string({value})) : {_TOO_MANY}))"
    )
    each = f"(has(c.resources) && has({limits}) && {key} in {limits} ? {amount} : 0)"
    spec = f"{t}.template.spec"
    return f"(has({t}.template) && has({spec}) && has({spec}.containers) ? {spec}.containers.map(c, {each}).sum() : 0)"


def _meta_text(m: str) -> str:
    def of(field: str) -> str:
        return f"(has({m}.{field}) ? {m}.{field}.map(k, k + string({m}.{field}[k])).join() : '')"

    return f"{of('annotations')} + {of('labels')}"


def _container_text(c: str) -> str:
    def one(field: str) -> str:
        return f"(has({c}.{field}) ? string({c}.{field}) : '')"

    def many(field: str) -> str:
        return f"(has({c}.{field}) ? {c}.{field}.map(x, string(x)).join() : '')"

    env = f"(has({c}.env) ? {c}.env.map(e, e.name + (has(e.value) ? e.value : '')).join() : '')"
    return f"{one('image')} + {one('workingDir')} + {many('command')} + {many('args')} + {env}"


def _text() -> str:
    """CEL: the Job's free text, as one string (only its size is read). A client counts the same with
    cluster_facts/job_text.py ``job_text_size`` (``make put`` does, to fit a file under the limit)."""
    containers = (
        "((has(t.template.spec.containers) ? t.template.spec.containers : [])"
        " + (has(t.template.spec.initContainers) ? t.template.spec.initContainers : []))"
    )
    per_task = (
        "(has(t.template) && has(t.template.metadata) ? " + _meta_text("t.template.metadata") + " : '')"
        f" + (has(t.template) && has(t.template.spec) ? {containers}.map(c, {_container_text('c')}).join() : '')"
    )
    tasks = "(has(object.spec.tasks) ? object.spec.tasks : [])"
    return f"{_meta_text('object.metadata')} + {tasks}.map(t, {per_task}).join()"


def _adopted_message() -> str:
    """CEL: the Job, when it was created and by which clients (its managedFields' managers)."""
    old = "oldObject.metadata"
    created = f"(has({old}.creationTimestamp) ? string({old}.creationTimestamp) : 'at an unknown time')"
    clients = (
        f"(has({old}.managedFields) && size({old}.managedFields) > 0"
        f" ? {old}.managedFields.map(f, has(f.manager) ? f.manager : '?').join(', ') : 'unknown clients')"
    )
    return (
        "'Volcano Job ' + variables.ns + '/' + variables.name + ' was not created by the stack: created '"
        f" + {created} + ' by ' + {clients} + ' (the API server audit log names the user); the stack"
        " applies its runs only over Jobs it created: delete it (kubectl delete jobs.batch.volcano.sh -n '"
        " + variables.ns + ' ' + variables.name + ') and deploy again'"
    )


def _stack_marked(obj: str) -> str:
    return (
        f"({obj} != null && has({obj}.metadata.labels)"
        f" && {obj}.metadata.labels.exists(k, k.startsWith({cel_string(CDK_PRUNE_LABEL_PREFIX)})))"
    )


def job_rules(*, stuck_minutes_ceiling: int | None) -> list[dict[str, str]]:
    """The Job-only validations, in the order the API server reports them."""
    plugins = "object.spec.plugins"
    svc_flags = cel_string(_SVC_FLAGS)
    rules = [
        refuse(
            f"!has({plugins}) || {plugins}.all(k, k in {cel_list(_PLUGINS)} && (k != 'svc'"
            f" || {plugins}[k] == null || {plugins}[k].all(a, a.matches({svc_flags}))))",
            JobMessage.PLUGINS,
        ),
        refuse(
            "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.volumeClaim)"
            " && has(v.volumeClaimName) && v.volumeClaimName in variables.claims)",
            JobMessage.CLAIMS,
        ),
        refuse("variables.replicas.sum() <= variables.podBudget", JobMessage.REPLICAS),
        refuse("variables.chips.sum() <= variables.neuronDevices", JobMessage.DEVICES),
        refuse(f"size(variables.text) <= {JOB_TEXT_LIMIT}", JobMessage.SIZE),
        refuse(
            f"(!has(object.spec.maxRetry) || object.spec.maxRetry <= {MAX_RETRY})"
            " && (!has(object.spec.tasks) || object.spec.tasks.all(t,"
            f" !has(t.maxRetry) || t.maxRetry <= {MAX_RETRY}))",
            JobMessage.RETRIES,
        ),
        refuse(
            "request.operation != 'CREATE' || !variables.member || variables.appliedNames == ''"
            " || !variables.name.matches(variables.appliedNames)",
            JobMessage.APPLIED_NAME,
        ),
        {
            **refuse(
                f"request.operation != 'UPDATE' || !{_stack_marked('object')} || {_stack_marked('oldObject')}",
                JobMessage.ADOPTED,
            ),
            "messageExpression": _adopted_message(),
        },
    ]
    if stuck_minutes_ceiling is not None:
        annotations = "object.metadata.annotations"
        key = cel_string(STUCK_MINUTES_ANNOTATION)
        rules.append(
            refuse(
                f"!has({annotations}) || !({key} in {annotations}) || ({annotations}[{key}].matches('^[1-9][0-9]{{0,5}}$')"
                f" && int({annotations}[{key}]) <= {stuck_minutes_ceiling})",
                JobMessage.stuck_minutes(stuck_minutes_ceiling),
            )
        )
    return rules
