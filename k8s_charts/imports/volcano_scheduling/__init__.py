from __future__ import annotations

from pkgutil import extend_path
__path__ = extend_path(__path__, __name__)

import abc
import builtins
import datetime
import enum
import typing

import jsii
import publication
import typing_extensions

from jsii._type_checking import cached_type_hints, check_type


from ._jsii import *

class _LazyImport:
    def __init__(self, module_name: str) -> None:
        self._module_name = module_name
        self._module: typing.Any = None
    def __getattr__(self, name: str) -> typing.Any:
        if self._module is None:
            import importlib
            self._module = importlib.import_module(self._module_name)
        return getattr(self._module, name)

if typing.TYPE_CHECKING:

    import cdk8s as _cdk8s_d3d9af27
    import constructs as _constructs_77d1e7e8
else:

    _cdk8s_d3d9af27 = _LazyImport("cdk8s")
    _constructs_77d1e7e8 = _LazyImport("constructs")


class PodGroup(
    _cdk8s_d3d9af27.ApiObject,
    metaclass=jsii.JSIIMeta,
    jsii_type="shvolcanoscheduling.PodGroup",
):
    '''PodGroup is a collection of Pod;

    used for batch workload.

    :schema: PodGroup
    '''

    def __init__(
        self,
        scope: "_constructs_77d1e7e8.Construct",
        id: builtins.str,
        *,
        metadata: typing.Optional[typing.Union["_cdk8s_d3d9af27.ApiObjectMetadata", typing.Dict[builtins.str, typing.Any]]] = None,
        spec: typing.Optional[typing.Union["PodGroupSpec", typing.Dict[builtins.str, typing.Any]]] = None,
    ) -> None:
        '''Defines a "PodGroup" API object.

        :param scope: the scope in which to define this object.
        :param id: a scope-local name for the object.
        :param metadata: 
        :param spec: Specification of the desired behavior of the pod group. More info: https://git.k8s.io/community/contributors/devel/api-conventions.md#spec-and-status
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__68f1667ad801eca5637211878aedca0c3c8a8afaf036e924029102752adf79c6)
            check_type(argname="argument scope", value=scope, expected_type=type_hints["scope"])
            check_type(argname="argument id", value=id, expected_type=type_hints["id"])
        props = PodGroupProps(metadata=metadata, spec=spec)

        jsii.create(self.__class__, self, [scope, id, props])

    @jsii.member(jsii_name="manifest")
    @builtins.classmethod
    def manifest(
        cls,
        *,
        metadata: typing.Optional[typing.Union["_cdk8s_d3d9af27.ApiObjectMetadata", typing.Dict[builtins.str, typing.Any]]] = None,
        spec: typing.Optional[typing.Union["PodGroupSpec", typing.Dict[builtins.str, typing.Any]]] = None,
    ) -> typing.Any:
        '''Renders a Kubernetes manifest for "PodGroup".

        This can be used to inline resource manifests inside other objects (e.g. as templates).

        :param metadata: 
        :param spec: Specification of the desired behavior of the pod group. More info: https://git.k8s.io/community/contributors/devel/api-conventions.md#spec-and-status
        '''
        props = PodGroupProps(metadata=metadata, spec=spec)

        return typing.cast(typing.Any, jsii.sinvoke(cls, "manifest", [props]))

    @jsii.member(jsii_name="toJson")
    def to_json(self) -> typing.Any:
        '''Renders the object to Kubernetes JSON.'''
        return typing.cast(typing.Any, jsii.invoke(self, "toJson", []))

    @jsii.python.classproperty
    @jsii.member(jsii_name="GVK")
    def GVK(cls) -> "_cdk8s_d3d9af27.GroupVersionKind":
        '''Returns the apiVersion and kind for "PodGroup".'''
        return typing.cast("_cdk8s_d3d9af27.GroupVersionKind", jsii.sget(cls, "GVK"))


@jsii.data_type(
    jsii_type="shvolcanoscheduling.PodGroupProps",
    jsii_struct_bases=[],
    name_mapping={"metadata": "metadata", "spec": "spec"},
)
class PodGroupProps:
    def __init__(
        self,
        *,
        metadata: typing.Optional[typing.Union["_cdk8s_d3d9af27.ApiObjectMetadata", typing.Dict[builtins.str, typing.Any]]] = None,
        spec: typing.Optional[typing.Union["PodGroupSpec", typing.Dict[builtins.str, typing.Any]]] = None,
    ) -> None:
        '''PodGroup is a collection of Pod;

        used for batch workload.

        :param metadata: 
        :param spec: Specification of the desired behavior of the pod group. More info: https://git.k8s.io/community/contributors/devel/api-conventions.md#spec-and-status

        :schema: PodGroup
        '''
        if isinstance(metadata, dict):
            metadata = _cdk8s_d3d9af27.ApiObjectMetadata(**metadata)
        if isinstance(spec, dict):
            spec = PodGroupSpec(**spec)
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__767f72e880f2ac0370b27b56d0066e5d818cbc90f10c6a6887241fd3aa865d00)
            check_type(argname="argument metadata", value=metadata, expected_type=type_hints["metadata"])
            check_type(argname="argument spec", value=spec, expected_type=type_hints["spec"])
        self._values: typing.Dict[builtins.str, typing.Any] = {}
        if metadata is not None:
            self._values["metadata"] = metadata
        if spec is not None:
            self._values["spec"] = spec

    @builtins.property
    def metadata(self) -> typing.Optional["_cdk8s_d3d9af27.ApiObjectMetadata"]:
        '''
        :schema: PodGroup#metadata
        '''
        result = self._values.get("metadata")
        return typing.cast(typing.Optional["_cdk8s_d3d9af27.ApiObjectMetadata"], result)

    @builtins.property
    def spec(self) -> typing.Optional["PodGroupSpec"]:
        '''Specification of the desired behavior of the pod group.

        More info: https://git.k8s.io/community/contributors/devel/api-conventions.md#spec-and-status

        :schema: PodGroup#spec
        '''
        result = self._values.get("spec")
        return typing.cast(typing.Optional["PodGroupSpec"], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "PodGroupProps(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


@jsii.data_type(
    jsii_type="shvolcanoscheduling.PodGroupSpec",
    jsii_struct_bases=[],
    name_mapping={
        "min_member": "minMember",
        "min_resources": "minResources",
        "min_task_member": "minTaskMember",
        "network_topology": "networkTopology",
        "priority_class_name": "priorityClassName",
        "queue": "queue",
        "sub_group_policy": "subGroupPolicy",
    },
)
class PodGroupSpec:
    def __init__(
        self,
        *,
        min_member: typing.Optional[jsii.Number] = None,
        min_resources: typing.Optional[typing.Mapping[builtins.str, "PodGroupSpecMinResources"]] = None,
        min_task_member: typing.Optional[typing.Mapping[builtins.str, jsii.Number]] = None,
        network_topology: typing.Optional[typing.Union["PodGroupSpecNetworkTopology", typing.Dict[builtins.str, typing.Any]]] = None,
        priority_class_name: typing.Optional[builtins.str] = None,
        queue: typing.Optional[builtins.str] = None,
        sub_group_policy: typing.Optional[typing.Sequence[typing.Union["PodGroupSpecSubGroupPolicy", typing.Dict[builtins.str, typing.Any]]]] = None,
    ) -> None:
        '''Specification of the desired behavior of the pod group.

        More info: https://git.k8s.io/community/contributors/devel/api-conventions.md#spec-and-status

        :param min_member: MinMember defines the minimal number of members/tasks to run the pod group; if there's not enough resources to start all tasks, the scheduler will not start anyone.
        :param min_resources: MinResources defines the minimal resource of members/tasks to run the pod group; if there's not enough resources to start all tasks, the scheduler will not start anyone.
        :param min_task_member: MinTaskMember defines the minimal number of pods to run for each task in the pod group; if there's not enough resources to start each task, the scheduler will not start anyone. SubGroupPolicy covers all capabilities of minTaskMember, while providing richer network topology and Gang scheduling management capabilities. Recommend using SubGroupPolicy to uniformly manage Gang scheduling for each Task group.
        :param network_topology: NetworkTopology defines the NetworkTopology config, this field works in conjunction with network topology feature and hyperNode CRD.
        :param priority_class_name: If specified, indicates the PodGroup's priority. "system-node-critical" and "system-cluster-critical" are two special keywords which indicate the highest priorities with the former being the highest priority. Any other name must be defined by creating a PriorityClass object with that name. If not specified, the PodGroup priority will be default or zero if there is no default.
        :param queue: Queue defines the queue to allocate resource for PodGroup; if queue does not exist, the PodGroup will not be scheduled. Defaults to ``default`` Queue with the lowest weight. Default: default` Queue with the lowest weight.
        :param sub_group_policy: Compared with minTaskMember, it offers more comprehensive topology scheduling and Gang scheduling management capabilities. Concurrent use with minTaskMember is not recommended, and SubGroupPolicy is the long-term evolution direction.

        :schema: PodGroupSpec
        '''
        if isinstance(network_topology, dict):
            network_topology = PodGroupSpecNetworkTopology(**network_topology)
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__909ddf824956ef6b268b8792dacedb7270fc28da3aa20704a47a82758ab100f2)
            check_type(argname="argument min_member", value=min_member, expected_type=type_hints["min_member"])
            check_type(argname="argument min_resources", value=min_resources, expected_type=type_hints["min_resources"])
            check_type(argname="argument min_task_member", value=min_task_member, expected_type=type_hints["min_task_member"])
            check_type(argname="argument network_topology", value=network_topology, expected_type=type_hints["network_topology"])
            check_type(argname="argument priority_class_name", value=priority_class_name, expected_type=type_hints["priority_class_name"])
            check_type(argname="argument queue", value=queue, expected_type=type_hints["queue"])
            check_type(argname="argument sub_group_policy", value=sub_group_policy, expected_type=type_hints["sub_group_policy"])
        self._values: typing.Dict[builtins.str, typing.Any] = {}
        if min_member is not None:
            self._values["min_member"] = min_member
        if min_resources is not None:
            self._values["min_resources"] = min_resources
        if min_task_member is not None:
            self._values["min_task_member"] = min_task_member
        if network_topology is not None:
            self._values["network_topology"] = network_topology
        if priority_class_name is not None:
            self._values["priority_class_name"] = priority_class_name
        if queue is not None:
            self._values["queue"] = queue
        if sub_group_policy is not None:
            self._values["sub_group_policy"] = sub_group_policy

    @builtins.property
    def min_member(self) -> typing.Optional[jsii.Number]:
        '''MinMember defines the minimal number of members/tasks to run the pod group;

        if there's not enough resources to start all tasks, the scheduler
        will not start anyone.

        :schema: PodGroupSpec#minMember
        '''
        result = self._values.get("min_member")
        return typing.cast(typing.Optional[jsii.Number], result)

    @builtins.property
    def min_resources(
        self,
    ) -> typing.Optional[typing.Mapping[builtins.str, "PodGroupSpecMinResources"]]:
        '''MinResources defines the minimal resource of members/tasks to run the pod group;

        if there's not enough resources to start all tasks, the scheduler
        will not start anyone.

        :schema: PodGroupSpec#minResources
        '''
        result = self._values.get("min_resources")
        return typing.cast(typing.Optional[typing.Mapping[builtins.str, "PodGroupSpecMinResources"]], result)

    @builtins.property
    def min_task_member(
        self,
    ) -> typing.Optional[typing.Mapping[builtins.str, jsii.Number]]:
        '''MinTaskMember defines the minimal number of pods to run for each task in the pod group;

        if there's not enough resources to start each task, the scheduler
        will not start anyone.
        SubGroupPolicy covers all capabilities of minTaskMember, while providing richer network topology and Gang scheduling management capabilities.
        Recommend using SubGroupPolicy to uniformly manage Gang scheduling for each Task group.

        :schema: PodGroupSpec#minTaskMember
        '''
        result = self._values.get("min_task_member")
        return typing.cast(typing.Optional[typing.Mapping[builtins.str, jsii.Number]], result)

    @builtins.property
    def network_topology(self) -> typing.Optional["PodGroupSpecNetworkTopology"]:
        '''NetworkTopology defines the NetworkTopology config, this field works in conjunction with network topology feature and hyperNode CRD.

        :schema: PodGroupSpec#networkTopology
        '''
        result = self._values.get("network_topology")
        return typing.cast(typing.Optional["PodGroupSpecNetworkTopology"], result)

    @builtins.property
    def priority_class_name(self) -> typing.Optional[builtins.str]:
        '''If specified, indicates the PodGroup's priority.

        "system-node-critical" and
        "system-cluster-critical" are two special keywords which indicate the
        highest priorities with the former being the highest priority. Any other
        name must be defined by creating a PriorityClass object with that name.
        If not specified, the PodGroup priority will be default or zero if there is no
        default.

        :schema: PodGroupSpec#priorityClassName
        '''
        result = self._values.get("priority_class_name")
        return typing.cast(typing.Optional[builtins.str], result)

    @builtins.property
    def queue(self) -> typing.Optional[builtins.str]:
        '''Queue defines the queue to allocate resource for PodGroup;

        if queue does not exist,
        the PodGroup will not be scheduled. Defaults to ``default`` Queue with the lowest weight.

        :default: default` Queue with the lowest weight.

        :schema: PodGroupSpec#queue
        '''
        result = self._values.get("queue")
        return typing.cast(typing.Optional[builtins.str], result)

    @builtins.property
    def sub_group_policy(
        self,
    ) -> typing.Optional[typing.List["PodGroupSpecSubGroupPolicy"]]:
        '''Compared with minTaskMember, it offers more comprehensive topology scheduling and Gang scheduling management capabilities.

        Concurrent use with minTaskMember is not recommended, and SubGroupPolicy is the long-term evolution direction.

        :schema: PodGroupSpec#subGroupPolicy
        '''
        result = self._values.get("sub_group_policy")
        return typing.cast(typing.Optional[typing.List["PodGroupSpecSubGroupPolicy"]], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "PodGroupSpec(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


class PodGroupSpecMinResources(
    metaclass=jsii.JSIIMeta,
    jsii_type="shvolcanoscheduling.PodGroupSpecMinResources",
):
    '''
    :schema: PodGroupSpecMinResources
    '''

    @jsii.member(jsii_name="fromNumber")
    @builtins.classmethod
    def from_number(cls, value: jsii.Number) -> "PodGroupSpecMinResources":
        '''
        :param value: -
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__f632a04bef6b0898a239d4208961260d6d458d5368962af59f921a6ae86c2244)
            check_type(argname="argument value", value=value, expected_type=type_hints["value"])
        return typing.cast("PodGroupSpecMinResources", jsii.sinvoke(cls, "fromNumber", [value]))

    @jsii.member(jsii_name="fromString")
    @builtins.classmethod
    def from_string(cls, value: builtins.str) -> "PodGroupSpecMinResources":
        '''
        :param value: -
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__b24e3a210a677993706934b51c1ee32e027a1100451a061f14d2ad188636c9f7)
            check_type(argname="argument value", value=value, expected_type=type_hints["value"])
        return typing.cast("PodGroupSpecMinResources", jsii.sinvoke(cls, "fromString", [value]))

    @builtins.property
    @jsii.member(jsii_name="value")
    def value(self) -> typing.Union[builtins.str, jsii.Number]:
        return typing.cast(typing.Union[builtins.str, jsii.Number], jsii.get(self, "value"))


@jsii.data_type(
    jsii_type="shvolcanoscheduling.PodGroupSpecNetworkTopology",
    jsii_struct_bases=[],
    name_mapping={
        "highest_tier_allowed": "highestTierAllowed",
        "highest_tier_name": "highestTierName",
        "mode": "mode",
    },
)
class PodGroupSpecNetworkTopology:
    def __init__(
        self,
        *,
        highest_tier_allowed: typing.Optional[jsii.Number] = None,
        highest_tier_name: typing.Optional[builtins.str] = None,
        mode: typing.Optional["PodGroupSpecNetworkTopologyMode"] = None,
    ) -> None:
        '''NetworkTopology defines the NetworkTopology config, this field works in conjunction with network topology feature and hyperNode CRD.

        :param highest_tier_allowed: HighestTierAllowed specifies the highest tier that a job allowed to cross when scheduling.
        :param highest_tier_name: HighestTierName specifies the highest tier name that a job allowed to cross when scheduling. HighestTierName and HighestTierAllowed cannot be set simultaneously.
        :param mode: Mode specifies the mode of the network topology constrain.

        :schema: PodGroupSpecNetworkTopology
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__bf579303db03eb6d0703d3732d325b66d9556143a8367f6b4fb11c5521f0f7cb)
            check_type(argname="argument highest_tier_allowed", value=highest_tier_allowed, expected_type=type_hints["highest_tier_allowed"])
            check_type(argname="argument highest_tier_name", value=highest_tier_name, expected_type=type_hints["highest_tier_name"])
            check_type(argname="argument mode", value=mode, expected_type=type_hints["mode"])
        self._values: typing.Dict[builtins.str, typing.Any] = {}
        if highest_tier_allowed is not None:
            self._values["highest_tier_allowed"] = highest_tier_allowed
        if highest_tier_name is not None:
            self._values["highest_tier_name"] = highest_tier_name
        if mode is not None:
            self._values["mode"] = mode

    @builtins.property
    def highest_tier_allowed(self) -> typing.Optional[jsii.Number]:
        '''HighestTierAllowed specifies the highest tier that a job allowed to cross when scheduling.

        :schema: PodGroupSpecNetworkTopology#highestTierAllowed
        '''
        result = self._values.get("highest_tier_allowed")
        return typing.cast(typing.Optional[jsii.Number], result)

    @builtins.property
    def highest_tier_name(self) -> typing.Optional[builtins.str]:
        '''HighestTierName specifies the highest tier name that a job allowed to cross when scheduling.

        HighestTierName and HighestTierAllowed cannot be set simultaneously.

        :schema: PodGroupSpecNetworkTopology#highestTierName
        '''
        result = self._values.get("highest_tier_name")
        return typing.cast(typing.Optional[builtins.str], result)

    @builtins.property
    def mode(self) -> typing.Optional["PodGroupSpecNetworkTopologyMode"]:
        '''Mode specifies the mode of the network topology constrain.

        :schema: PodGroupSpecNetworkTopology#mode
        '''
        result = self._values.get("mode")
        return typing.cast(typing.Optional["PodGroupSpecNetworkTopologyMode"], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "PodGroupSpecNetworkTopology(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


@jsii.enum(jsii_type="shvolcanoscheduling.PodGroupSpecNetworkTopologyMode")
class PodGroupSpecNetworkTopologyMode(enum.Enum):
    '''Mode specifies the mode of the network topology constrain.

    :schema: PodGroupSpecNetworkTopologyMode
    '''

    HARD = "HARD"
    '''hard.'''
    SOFT = "SOFT"
    '''soft.'''


@jsii.data_type(
    jsii_type="shvolcanoscheduling.PodGroupSpecSubGroupPolicy",
    jsii_struct_bases=[],
    name_mapping={
        "label_selector": "labelSelector",
        "match_label_keys": "matchLabelKeys",
        "min_sub_groups": "minSubGroups",
        "name": "name",
        "network_topology": "networkTopology",
        "sub_group_size": "subGroupSize",
    },
)
class PodGroupSpecSubGroupPolicy:
    def __init__(
        self,
        *,
        label_selector: typing.Optional[typing.Union["PodGroupSpecSubGroupPolicyLabelSelector", typing.Dict[builtins.str, typing.Any]]] = None,
        match_label_keys: typing.Optional[typing.Sequence[builtins.str]] = None,
        min_sub_groups: typing.Optional[jsii.Number] = None,
        name: typing.Optional[builtins.str] = None,
        network_topology: typing.Optional[typing.Union["PodGroupSpecSubGroupPolicyNetworkTopology", typing.Dict[builtins.str, typing.Any]]] = None,
        sub_group_size: typing.Optional[jsii.Number] = None,
    ) -> None:
        '''
        :param label_selector: LabelSelector is used to find matching pods. Pods that match this label selector are counted to determine the number of pods in their corresponding topology domain.
        :param match_label_keys: MatchLabelKeys: A label-based grouping configuration field for Pods, defining filtering rules for grouping label keys Core function: Refine grouping of Pods that meet LabelSelector criteria by label attributes, with the following rules and constraints: 1. Scope: Only applies to Pods matching the predefined LabelSelector 2. Grouping rule: Specify one or more label keys; Pods containing the target label keys with exactly the same corresponding label values are grouped together 3. Policy constraint: Pods in the same group follow a unified NetworkTopology policy to achieve group-level network behavior governance
        :param min_sub_groups: MinSubGroups: Minimum number of subgroups required to trigger scheduling. Scheduling is initiated only if cluster resources meet the requirements of at least this number of subgroups. Subgroup-level Gang Scheduling
        :param name: Name specifies the name of SubGroupPolicy.
        :param network_topology: NetworkTopology defines the NetworkTopology config, this field works in conjunction with network topology feature and hyperNode CRD.
        :param sub_group_size: SubGroupSize defines the number of pods in each sub-affinity group. Only when a subGroup of pods, with a size of "subGroupSize", can satisfy the network topology constraint then will the subGroup be scheduled.

        :schema: PodGroupSpecSubGroupPolicy
        '''
        if isinstance(label_selector, dict):
            label_selector = PodGroupSpecSubGroupPolicyLabelSelector(**label_selector)
        if isinstance(network_topology, dict):
            network_topology = PodGroupSpecSubGroupPolicyNetworkTopology(**network_topology)
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__d1275977681448ab37496f215bebe09b86860a5e2249a78ee263efe108cec81f)
            check_type(argname="argument label_selector", value=label_selector, expected_type=type_hints["label_selector"])
            check_type(argname="argument match_label_keys", value=match_label_keys, expected_type=type_hints["match_label_keys"])
            check_type(argname="argument min_sub_groups", value=min_sub_groups, expected_type=type_hints["min_sub_groups"])
            check_type(argname="argument name", value=name, expected_type=type_hints["name"])
            check_type(argname="argument network_topology", value=network_topology, expected_type=type_hints["network_topology"])
            check_type(argname="argument sub_group_size", value=sub_group_size, expected_type=type_hints["sub_group_size"])
        self._values: typing.Dict[builtins.str, typing.Any] = {}
        if label_selector is not None:
            self._values["label_selector"] = label_selector
        if match_label_keys is not None:
            self._values["match_label_keys"] = match_label_keys
        if min_sub_groups is not None:
            self._values["min_sub_groups"] = min_sub_groups
        if name is not None:
            self._values["name"] = name
        if network_topology is not None:
            self._values["network_topology"] = network_topology
        if sub_group_size is not None:
            self._values["sub_group_size"] = sub_group_size

    @builtins.property
    def label_selector(
        self,
    ) -> typing.Optional["PodGroupSpecSubGroupPolicyLabelSelector"]:
        '''LabelSelector is used to find matching pods.

        Pods that match this label selector are counted to determine the number of pods
        in their corresponding topology domain.

        :schema: PodGroupSpecSubGroupPolicy#labelSelector
        '''
        result = self._values.get("label_selector")
        return typing.cast(typing.Optional["PodGroupSpecSubGroupPolicyLabelSelector"], result)

    @builtins.property
    def match_label_keys(self) -> typing.Optional[typing.List[builtins.str]]:
        '''MatchLabelKeys: A label-based grouping configuration field for Pods, defining filtering rules for grouping label keys Core function: Refine grouping of Pods that meet LabelSelector criteria by label attributes, with the following rules and constraints: 1.

        Scope: Only applies to Pods matching the predefined LabelSelector
        2. Grouping rule: Specify one or more label keys; Pods containing the target label keys with exactly the same corresponding label values are grouped together
        3. Policy constraint: Pods in the same group follow a unified NetworkTopology policy to achieve group-level network behavior governance

        :schema: PodGroupSpecSubGroupPolicy#matchLabelKeys
        '''
        result = self._values.get("match_label_keys")
        return typing.cast(typing.Optional[typing.List[builtins.str]], result)

    @builtins.property
    def min_sub_groups(self) -> typing.Optional[jsii.Number]:
        '''MinSubGroups: Minimum number of subgroups required to trigger scheduling.

        Scheduling is initiated only if cluster resources meet the requirements of at least this number of subgroups.
        Subgroup-level Gang Scheduling

        :schema: PodGroupSpecSubGroupPolicy#minSubGroups
        '''
        result = self._values.get("min_sub_groups")
        return typing.cast(typing.Optional[jsii.Number], result)

    @builtins.property
    def name(self) -> typing.Optional[builtins.str]:
        '''Name specifies the name of SubGroupPolicy.

        :schema: PodGroupSpecSubGroupPolicy#name
        '''
        result = self._values.get("name")
        return typing.cast(typing.Optional[builtins.str], result)

    @builtins.property
    def network_topology(
        self,
    ) -> typing.Optional["PodGroupSpecSubGroupPolicyNetworkTopology"]:
        '''NetworkTopology defines the NetworkTopology config, this field works in conjunction with network topology feature and hyperNode CRD.

        :schema: PodGroupSpecSubGroupPolicy#networkTopology
        '''
        result = self._values.get("network_topology")
        return typing.cast(typing.Optional["PodGroupSpecSubGroupPolicyNetworkTopology"], result)

    @builtins.property
    def sub_group_size(self) -> typing.Optional[jsii.Number]:
        '''SubGroupSize defines the number of pods in each sub-affinity group.

        Only when a subGroup of pods, with a size of "subGroupSize", can satisfy the network topology constraint then will the subGroup be scheduled.

        :schema: PodGroupSpecSubGroupPolicy#subGroupSize
        '''
        result = self._values.get("sub_group_size")
        return typing.cast(typing.Optional[jsii.Number], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "PodGroupSpecSubGroupPolicy(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


@jsii.data_type(
    jsii_type="shvolcanoscheduling.PodGroupSpecSubGroupPolicyLabelSelector",
    jsii_struct_bases=[],
    name_mapping={
        "match_expressions": "matchExpressions",
        "match_labels": "matchLabels",
    },
)
class PodGroupSpecSubGroupPolicyLabelSelector:
    def __init__(
        self,
        *,
        match_expressions: typing.Optional[typing.Sequence[typing.Union["PodGroupSpecSubGroupPolicyLabelSelectorMatchExpressions", typing.Dict[builtins.str, typing.Any]]]] = None,
        match_labels: typing.Optional[typing.Mapping[builtins.str, builtins.str]] = None,
    ) -> None:
        '''LabelSelector is used to find matching pods.

        Pods that match this label selector are counted to determine the number of pods
        in their corresponding topology domain.

        :param match_expressions: matchExpressions is a list of label selector requirements. The requirements are ANDed.
        :param match_labels: matchLabels is a map of {key,value} pairs. A single {key,value} in the matchLabels map is equivalent to an element of matchExpressions, whose key field is "key", the operator is "In", and the values array contains only "value". The requirements are ANDed.

        :schema: PodGroupSpecSubGroupPolicyLabelSelector
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__c17e7bad3729f4d889672d89b134bb38f1bcba0560415e485f4238813c5140e0)
            check_type(argname="argument match_expressions", value=match_expressions, expected_type=type_hints["match_expressions"])
            check_type(argname="argument match_labels", value=match_labels, expected_type=type_hints["match_labels"])
        self._values: typing.Dict[builtins.str, typing.Any] = {}
        if match_expressions is not None:
            self._values["match_expressions"] = match_expressions
        if match_labels is not None:
            self._values["match_labels"] = match_labels

    @builtins.property
    def match_expressions(
        self,
    ) -> typing.Optional[typing.List["PodGroupSpecSubGroupPolicyLabelSelectorMatchExpressions"]]:
        '''matchExpressions is a list of label selector requirements.

        The requirements are ANDed.

        :schema: PodGroupSpecSubGroupPolicyLabelSelector#matchExpressions
        '''
        result = self._values.get("match_expressions")
        return typing.cast(typing.Optional[typing.List["PodGroupSpecSubGroupPolicyLabelSelectorMatchExpressions"]], result)

    @builtins.property
    def match_labels(
        self,
    ) -> typing.Optional[typing.Mapping[builtins.str, builtins.str]]:
        '''matchLabels is a map of {key,value} pairs.

        A single {key,value} in the matchLabels
        map is equivalent to an element of matchExpressions, whose key field is "key", the
        operator is "In", and the values array contains only "value". The requirements are ANDed.

        :schema: PodGroupSpecSubGroupPolicyLabelSelector#matchLabels
        '''
        result = self._values.get("match_labels")
        return typing.cast(typing.Optional[typing.Mapping[builtins.str, builtins.str]], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "PodGroupSpecSubGroupPolicyLabelSelector(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


@jsii.data_type(
    jsii_type="shvolcanoscheduling.PodGroupSpecSubGroupPolicyLabelSelectorMatchExpressions",
    jsii_struct_bases=[],
    name_mapping={"key": "key", "operator": "operator", "values": "values"},
)
class PodGroupSpecSubGroupPolicyLabelSelectorMatchExpressions:
    def __init__(
        self,
        *,
        key: builtins.str,
        operator: builtins.str,
        values: typing.Optional[typing.Sequence[builtins.str]] = None,
    ) -> None:
        '''A label selector requirement is a selector that contains values, a key, and an operator that relates the key and values.

        :param key: key is the label key that the selector applies to.
        :param operator: operator represents a key's relationship to a set of values. Valid operators are In, NotIn, Exists and DoesNotExist.
        :param values: values is an array of string values. If the operator is In or NotIn, the values array must be non-empty. If the operator is Exists or DoesNotExist, the values array must be empty. This array is replaced during a strategic merge patch.

        :schema: PodGroupSpecSubGroupPolicyLabelSelectorMatchExpressions
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__3dadafae203e4354d50286aa1324d47fb2932ba45193e5a042e0a6cb4c0509ca)
            check_type(argname="argument key", value=key, expected_type=type_hints["key"])
            check_type(argname="argument operator", value=operator, expected_type=type_hints["operator"])
            check_type(argname="argument values", value=values, expected_type=type_hints["values"])
        self._values: typing.Dict[builtins.str, typing.Any] = {
            "key": key,
            "operator": operator,
        }
        if values is not None:
            self._values["values"] = values

    @builtins.property
    def key(self) -> builtins.str:
        '''key is the label key that the selector applies to.

        :schema: PodGroupSpecSubGroupPolicyLabelSelectorMatchExpressions#key
        '''
        result = self._values.get("key")
        assert result is not None, "Required property 'key' is missing"
        return typing.cast(builtins.str, result)

    @builtins.property
    def operator(self) -> builtins.str:
        '''operator represents a key's relationship to a set of values.

        Valid operators are In, NotIn, Exists and DoesNotExist.

        :schema: PodGroupSpecSubGroupPolicyLabelSelectorMatchExpressions#operator
        '''
        result = self._values.get("operator")
        assert result is not None, "Required property 'operator' is missing"
        return typing.cast(builtins.str, result)

    @builtins.property
    def values(self) -> typing.Optional[typing.List[builtins.str]]:
        '''values is an array of string values.

        If the operator is In or NotIn,
        the values array must be non-empty. If the operator is Exists or DoesNotExist,
        the values array must be empty. This array is replaced during a strategic
        merge patch.

        :schema: PodGroupSpecSubGroupPolicyLabelSelectorMatchExpressions#values
        '''
        result = self._values.get("values")
        return typing.cast(typing.Optional[typing.List[builtins.str]], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "PodGroupSpecSubGroupPolicyLabelSelectorMatchExpressions(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


@jsii.data_type(
    jsii_type="shvolcanoscheduling.PodGroupSpecSubGroupPolicyNetworkTopology",
    jsii_struct_bases=[],
    name_mapping={
        "highest_tier_allowed": "highestTierAllowed",
        "highest_tier_name": "highestTierName",
        "mode": "mode",
    },
)
class PodGroupSpecSubGroupPolicyNetworkTopology:
    def __init__(
        self,
        *,
        highest_tier_allowed: typing.Optional[jsii.Number] = None,
        highest_tier_name: typing.Optional[builtins.str] = None,
        mode: typing.Optional["PodGroupSpecSubGroupPolicyNetworkTopologyMode"] = None,
    ) -> None:
        '''NetworkTopology defines the NetworkTopology config, this field works in conjunction with network topology feature and hyperNode CRD.

        :param highest_tier_allowed: HighestTierAllowed specifies the highest tier that a job allowed to cross when scheduling.
        :param highest_tier_name: HighestTierName specifies the highest tier name that a job allowed to cross when scheduling. HighestTierName and HighestTierAllowed cannot be set simultaneously.
        :param mode: Mode specifies the mode of the network topology constrain.

        :schema: PodGroupSpecSubGroupPolicyNetworkTopology
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__84a1ae60e5c199bcad6d40fcee0df8dca709a4feb398d8773c4fab8d120ceb20)
            check_type(argname="argument highest_tier_allowed", value=highest_tier_allowed, expected_type=type_hints["highest_tier_allowed"])
            check_type(argname="argument highest_tier_name", value=highest_tier_name, expected_type=type_hints["highest_tier_name"])
            check_type(argname="argument mode", value=mode, expected_type=type_hints["mode"])
        self._values: typing.Dict[builtins.str, typing.Any] = {}
        if highest_tier_allowed is not None:
            self._values["highest_tier_allowed"] = highest_tier_allowed
        if highest_tier_name is not None:
            self._values["highest_tier_name"] = highest_tier_name
        if mode is not None:
            self._values["mode"] = mode

    @builtins.property
    def highest_tier_allowed(self) -> typing.Optional[jsii.Number]:
        '''HighestTierAllowed specifies the highest tier that a job allowed to cross when scheduling.

        :schema: PodGroupSpecSubGroupPolicyNetworkTopology#highestTierAllowed
        '''
        result = self._values.get("highest_tier_allowed")
        return typing.cast(typing.Optional[jsii.Number], result)

    @builtins.property
    def highest_tier_name(self) -> typing.Optional[builtins.str]:
        '''HighestTierName specifies the highest tier name that a job allowed to cross when scheduling.

        HighestTierName and HighestTierAllowed cannot be set simultaneously.

        :schema: PodGroupSpecSubGroupPolicyNetworkTopology#highestTierName
        '''
        result = self._values.get("highest_tier_name")
        return typing.cast(typing.Optional[builtins.str], result)

    @builtins.property
    def mode(self) -> typing.Optional["PodGroupSpecSubGroupPolicyNetworkTopologyMode"]:
        '''Mode specifies the mode of the network topology constrain.

        :schema: PodGroupSpecSubGroupPolicyNetworkTopology#mode
        '''
        result = self._values.get("mode")
        return typing.cast(typing.Optional["PodGroupSpecSubGroupPolicyNetworkTopologyMode"], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "PodGroupSpecSubGroupPolicyNetworkTopology(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


@jsii.enum(
    jsii_type="shvolcanoscheduling.PodGroupSpecSubGroupPolicyNetworkTopologyMode"
)
class PodGroupSpecSubGroupPolicyNetworkTopologyMode(enum.Enum):
    '''Mode specifies the mode of the network topology constrain.

    :schema: PodGroupSpecSubGroupPolicyNetworkTopologyMode
    '''

    HARD = "HARD"
    '''hard.'''
    SOFT = "SOFT"
    '''soft.'''


class Queue(
    _cdk8s_d3d9af27.ApiObject,
    metaclass=jsii.JSIIMeta,
    jsii_type="shvolcanoscheduling.Queue",
):
    '''Queue is a queue of PodGroup.

    :schema: Queue
    '''

    def __init__(
        self,
        scope: "_constructs_77d1e7e8.Construct",
        id: builtins.str,
        *,
        metadata: typing.Optional[typing.Union["_cdk8s_d3d9af27.ApiObjectMetadata", typing.Dict[builtins.str, typing.Any]]] = None,
        spec: typing.Optional[typing.Union["QueueSpec", typing.Dict[builtins.str, typing.Any]]] = None,
    ) -> None:
        '''Defines a "Queue" API object.

        :param scope: the scope in which to define this object.
        :param id: a scope-local name for the object.
        :param metadata: 
        :param spec: Specification of the desired behavior of the queue. More info: https://git.k8s.io/community/contributors/devel/api-conventions.md#spec-and-status
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__7e564604f4ec6f4d773a62f700346a75a5e370dce3710b09bc70e09aea29edf8)
            check_type(argname="argument scope", value=scope, expected_type=type_hints["scope"])
            check_type(argname="argument id", value=id, expected_type=type_hints["id"])
        props = QueueProps(metadata=metadata, spec=spec)

        jsii.create(self.__class__, self, [scope, id, props])

    @jsii.member(jsii_name="manifest")
    @builtins.classmethod
    def manifest(
        cls,
        *,
        metadata: typing.Optional[typing.Union["_cdk8s_d3d9af27.ApiObjectMetadata", typing.Dict[builtins.str, typing.Any]]] = None,
        spec: typing.Optional[typing.Union["QueueSpec", typing.Dict[builtins.str, typing.Any]]] = None,
    ) -> typing.Any:
        '''Renders a Kubernetes manifest for "Queue".

        This can be used to inline resource manifests inside other objects (e.g. as templates).

        :param metadata: 
        :param spec: Specification of the desired behavior of the queue. More info: https://git.k8s.io/community/contributors/devel/api-conventions.md#spec-and-status
        '''
        props = QueueProps(metadata=metadata, spec=spec)

        return typing.cast(typing.Any, jsii.sinvoke(cls, "manifest", [props]))

    @jsii.member(jsii_name="toJson")
    def to_json(self) -> typing.Any:
        '''Renders the object to Kubernetes JSON.'''
        return typing.cast(typing.Any, jsii.invoke(self, "toJson", []))

    @jsii.python.classproperty
    @jsii.member(jsii_name="GVK")
    def GVK(cls) -> "_cdk8s_d3d9af27.GroupVersionKind":
        '''Returns the apiVersion and kind for "Queue".'''
        return typing.cast("_cdk8s_d3d9af27.GroupVersionKind", jsii.sget(cls, "GVK"))


@jsii.data_type(
    jsii_type="shvolcanoscheduling.QueueProps",
    jsii_struct_bases=[],
    name_mapping={"metadata": "metadata", "spec": "spec"},
)
class QueueProps:
    def __init__(
        self,
        *,
        metadata: typing.Optional[typing.Union["_cdk8s_d3d9af27.ApiObjectMetadata", typing.Dict[builtins.str, typing.Any]]] = None,
        spec: typing.Optional[typing.Union["QueueSpec", typing.Dict[builtins.str, typing.Any]]] = None,
    ) -> None:
        '''Queue is a queue of PodGroup.

        :param metadata: 
        :param spec: Specification of the desired behavior of the queue. More info: https://git.k8s.io/community/contributors/devel/api-conventions.md#spec-and-status

        :schema: Queue
        '''
        if isinstance(metadata, dict):
            metadata = _cdk8s_d3d9af27.ApiObjectMetadata(**metadata)
        if isinstance(spec, dict):
            spec = QueueSpec(**spec)
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__894bb2d2746e50ae008ae55c611b65949d26fc28c53588e562a41e0d6ef61c86)
            check_type(argname="argument metadata", value=metadata, expected_type=type_hints["metadata"])
            check_type(argname="argument spec", value=spec, expected_type=type_hints["spec"])
        self._values: typing.Dict[builtins.str, typing.Any] = {}
        if metadata is not None:
            self._values["metadata"] = metadata
        if spec is not None:
            self._values["spec"] = spec

    @builtins.property
    def metadata(self) -> typing.Optional["_cdk8s_d3d9af27.ApiObjectMetadata"]:
        '''
        :schema: Queue#metadata
        '''
        result = self._values.get("metadata")
        return typing.cast(typing.Optional["_cdk8s_d3d9af27.ApiObjectMetadata"], result)

    @builtins.property
    def spec(self) -> typing.Optional["QueueSpec"]:
        '''Specification of the desired behavior of the queue.

        More info: https://git.k8s.io/community/contributors/devel/api-conventions.md#spec-and-status

        :schema: Queue#spec
        '''
        result = self._values.get("spec")
        return typing.cast(typing.Optional["QueueSpec"], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "QueueProps(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


@jsii.data_type(
    jsii_type="shvolcanoscheduling.QueueSpec",
    jsii_struct_bases=[],
    name_mapping={
        "affinity": "affinity",
        "capability": "capability",
        "dequeue_strategy": "dequeueStrategy",
        "deserved": "deserved",
        "extend_clusters": "extendClusters",
        "guarantee": "guarantee",
        "parent": "parent",
        "priority": "priority",
        "reclaimable": "reclaimable",
        "type": "type",
        "weight": "weight",
    },
)
class QueueSpec:
    def __init__(
        self,
        *,
        affinity: typing.Optional[typing.Union["QueueSpecAffinity", typing.Dict[builtins.str, typing.Any]]] = None,
        capability: typing.Optional[typing.Mapping[builtins.str, "QueueSpecCapability"]] = None,
        dequeue_strategy: typing.Optional["QueueSpecDequeueStrategy"] = None,
        deserved: typing.Optional[typing.Mapping[builtins.str, "QueueSpecDeserved"]] = None,
        extend_clusters: typing.Optional[typing.Sequence[typing.Union["QueueSpecExtendClusters", typing.Dict[builtins.str, typing.Any]]]] = None,
        guarantee: typing.Optional[typing.Union["QueueSpecGuarantee", typing.Dict[builtins.str, typing.Any]]] = None,
        parent: typing.Optional[builtins.str] = None,
        priority: typing.Optional[jsii.Number] = None,
        reclaimable: typing.Optional[builtins.bool] = None,
        type: typing.Optional[builtins.str] = None,
        weight: typing.Optional[jsii.Number] = None,
    ) -> None:
        '''Specification of the desired behavior of the queue.

        More info: https://git.k8s.io/community/contributors/devel/api-conventions.md#spec-and-status

        :param affinity: If specified, the pod owned by the queue will be scheduled with constraint.
        :param capability: ResourceList is a set of (resource name, quantity) pairs.
        :param dequeue_strategy: DequeueStrategy defines the dequeue strategy of queue.
        :param deserved: The amount of resources configured by the user. This part of resource can be shared with other queues and reclaimed back.
        :param extend_clusters: extendCluster indicate the jobs in this Queue will be dispatched to these clusters.
        :param guarantee: Guarantee indicate configuration about resource reservation.
        :param parent: Parent define the parent of queue.
        :param priority: Priority define the priority of queue. Higher values are prioritized for scheduling and considered later during reclamation.
        :param reclaimable: Reclaimable indicate whether the queue can be reclaimed by other queue.
        :param type: Type define the type of queue.
        :param weight: 

        :schema: QueueSpec
        '''
        if isinstance(affinity, dict):
            affinity = QueueSpecAffinity(**affinity)
        if isinstance(guarantee, dict):
            guarantee = QueueSpecGuarantee(**guarantee)
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__24ca07e5d7940dd36f4fb48ad96068a86efa1c324385ff21b481790993a88422)
            check_type(argname="argument affinity", value=affinity, expected_type=type_hints["affinity"])
            check_type(argname="argument capability", value=capability, expected_type=type_hints["capability"])
            check_type(argname="argument dequeue_strategy", value=dequeue_strategy, expected_type=type_hints["dequeue_strategy"])
            check_type(argname="argument deserved", value=deserved, expected_type=type_hints["deserved"])
            check_type(argname="argument extend_clusters", value=extend_clusters, expected_type=type_hints["extend_clusters"])
            check_type(argname="argument guarantee", value=guarantee, expected_type=type_hints["guarantee"])
            check_type(argname="argument parent", value=parent, expected_type=type_hints["parent"])
            check_type(argname="argument priority", value=priority, expected_type=type_hints["priority"])
            check_type(argname="argument reclaimable", value=reclaimable, expected_type=type_hints["reclaimable"])
            check_type(argname="argument type", value=type, expected_type=type_hints["type"])
            check_type(argname="argument weight", value=weight, expected_type=type_hints["weight"])
        self._values: typing.Dict[builtins.str, typing.Any] = {}
        if affinity is not None:
            self._values["affinity"] = affinity
        if capability is not None:
            self._values["capability"] = capability
        if dequeue_strategy is not None:
            self._values["dequeue_strategy"] = dequeue_strategy
        if deserved is not None:
            self._values["deserved"] = deserved
        if extend_clusters is not None:
            self._values["extend_clusters"] = extend_clusters
        if guarantee is not None:
            self._values["guarantee"] = guarantee
        if parent is not None:
            self._values["parent"] = parent
        if priority is not None:
            self._values["priority"] = priority
        if reclaimable is not None:
            self._values["reclaimable"] = reclaimable
        if type is not None:
            self._values["type"] = type
        if weight is not None:
            self._values["weight"] = weight

    @builtins.property
    def affinity(self) -> typing.Optional["QueueSpecAffinity"]:
        '''If specified, the pod owned by the queue will be scheduled with constraint.

        :schema: QueueSpec#affinity
        '''
        result = self._values.get("affinity")
        return typing.cast(typing.Optional["QueueSpecAffinity"], result)

    @builtins.property
    def capability(
        self,
    ) -> typing.Optional[typing.Mapping[builtins.str, "QueueSpecCapability"]]:
        '''ResourceList is a set of (resource name, quantity) pairs.

        :schema: QueueSpec#capability
        '''
        result = self._values.get("capability")
        return typing.cast(typing.Optional[typing.Mapping[builtins.str, "QueueSpecCapability"]], result)

    @builtins.property
    def dequeue_strategy(self) -> typing.Optional["QueueSpecDequeueStrategy"]:
        '''DequeueStrategy defines the dequeue strategy of queue.

        :schema: QueueSpec#dequeueStrategy
        '''
        result = self._values.get("dequeue_strategy")
        return typing.cast(typing.Optional["QueueSpecDequeueStrategy"], result)

    @builtins.property
    def deserved(
        self,
    ) -> typing.Optional[typing.Mapping[builtins.str, "QueueSpecDeserved"]]:
        '''The amount of resources configured by the user.

        This part of resource can be shared with other queues and reclaimed back.

        :schema: QueueSpec#deserved
        '''
        result = self._values.get("deserved")
        return typing.cast(typing.Optional[typing.Mapping[builtins.str, "QueueSpecDeserved"]], result)

    @builtins.property
    def extend_clusters(
        self,
    ) -> typing.Optional[typing.List["QueueSpecExtendClusters"]]:
        '''extendCluster indicate the jobs in this Queue will be dispatched to these clusters.

        :schema: QueueSpec#extendClusters
        '''
        result = self._values.get("extend_clusters")
        return typing.cast(typing.Optional[typing.List["QueueSpecExtendClusters"]], result)

    @builtins.property
    def guarantee(self) -> typing.Optional["QueueSpecGuarantee"]:
        '''Guarantee indicate configuration about resource reservation.

        :schema: QueueSpec#guarantee
        '''
        result = self._values.get("guarantee")
        return typing.cast(typing.Optional["QueueSpecGuarantee"], result)

    @builtins.property
    def parent(self) -> typing.Optional[builtins.str]:
        '''Parent define the parent of queue.

        :schema: QueueSpec#parent
        '''
        result = self._values.get("parent")
        return typing.cast(typing.Optional[builtins.str], result)

    @builtins.property
    def priority(self) -> typing.Optional[jsii.Number]:
        '''Priority define the priority of queue.

        Higher values are prioritized for scheduling and considered later during reclamation.

        :schema: QueueSpec#priority
        '''
        result = self._values.get("priority")
        return typing.cast(typing.Optional[jsii.Number], result)

    @builtins.property
    def reclaimable(self) -> typing.Optional[builtins.bool]:
        '''Reclaimable indicate whether the queue can be reclaimed by other queue.

        :schema: QueueSpec#reclaimable
        '''
        result = self._values.get("reclaimable")
        return typing.cast(typing.Optional[builtins.bool], result)

    @builtins.property
    def type(self) -> typing.Optional[builtins.str]:
        '''Type define the type of queue.

        :schema: QueueSpec#type
        '''
        result = self._values.get("type")
        return typing.cast(typing.Optional[builtins.str], result)

    @builtins.property
    def weight(self) -> typing.Optional[jsii.Number]:
        '''
        :schema: QueueSpec#weight
        '''
        result = self._values.get("weight")
        return typing.cast(typing.Optional[jsii.Number], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "QueueSpec(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


@jsii.data_type(
    jsii_type="shvolcanoscheduling.QueueSpecAffinity",
    jsii_struct_bases=[],
    name_mapping={
        "node_group_affinity": "nodeGroupAffinity",
        "node_group_anti_affinity": "nodeGroupAntiAffinity",
    },
)
class QueueSpecAffinity:
    def __init__(
        self,
        *,
        node_group_affinity: typing.Optional[typing.Union["QueueSpecAffinityNodeGroupAffinity", typing.Dict[builtins.str, typing.Any]]] = None,
        node_group_anti_affinity: typing.Optional[typing.Union["QueueSpecAffinityNodeGroupAntiAffinity", typing.Dict[builtins.str, typing.Any]]] = None,
    ) -> None:
        '''If specified, the pod owned by the queue will be scheduled with constraint.

        :param node_group_affinity: Describes nodegroup affinity scheduling rules for the queue(e.g. putting pods of the queue in the nodes of the nodegroup).
        :param node_group_anti_affinity: Describes nodegroup anti-affinity scheduling rules for the queue(e.g. avoid putting pods of the queue in the nodes of the nodegroup).

        :schema: QueueSpecAffinity
        '''
        if isinstance(node_group_affinity, dict):
            node_group_affinity = QueueSpecAffinityNodeGroupAffinity(**node_group_affinity)
        if isinstance(node_group_anti_affinity, dict):
            node_group_anti_affinity = QueueSpecAffinityNodeGroupAntiAffinity(**node_group_anti_affinity)
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__d8fb5a7649e99de3fece1da9e2d4dfd57d10205bd9ee2b2248a5f5535367de96)
            check_type(argname="argument node_group_affinity", value=node_group_affinity, expected_type=type_hints["node_group_affinity"])
            check_type(argname="argument node_group_anti_affinity", value=node_group_anti_affinity, expected_type=type_hints["node_group_anti_affinity"])
        self._values: typing.Dict[builtins.str, typing.Any] = {}
        if node_group_affinity is not None:
            self._values["node_group_affinity"] = node_group_affinity
        if node_group_anti_affinity is not None:
            self._values["node_group_anti_affinity"] = node_group_anti_affinity

    @builtins.property
    def node_group_affinity(
        self,
    ) -> typing.Optional["QueueSpecAffinityNodeGroupAffinity"]:
        '''Describes nodegroup affinity scheduling rules for the queue(e.g. putting pods of the queue in the nodes of the nodegroup).

        :schema: QueueSpecAffinity#nodeGroupAffinity
        '''
        result = self._values.get("node_group_affinity")
        return typing.cast(typing.Optional["QueueSpecAffinityNodeGroupAffinity"], result)

    @builtins.property
    def node_group_anti_affinity(
        self,
    ) -> typing.Optional["QueueSpecAffinityNodeGroupAntiAffinity"]:
        '''Describes nodegroup anti-affinity scheduling rules for the queue(e.g. avoid putting pods of the queue in the nodes of the nodegroup).

        :schema: QueueSpecAffinity#nodeGroupAntiAffinity
        '''
        result = self._values.get("node_group_anti_affinity")
        return typing.cast(typing.Optional["QueueSpecAffinityNodeGroupAntiAffinity"], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "QueueSpecAffinity(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


@jsii.data_type(
    jsii_type="shvolcanoscheduling.QueueSpecAffinityNodeGroupAffinity",
    jsii_struct_bases=[],
    name_mapping={
        "preferred_during_scheduling_ignored_during_execution": "preferredDuringSchedulingIgnoredDuringExecution",
        "required_during_scheduling_ignored_during_execution": "requiredDuringSchedulingIgnoredDuringExecution",
    },
)
class QueueSpecAffinityNodeGroupAffinity:
    def __init__(
        self,
        *,
        preferred_during_scheduling_ignored_during_execution: typing.Optional[typing.Sequence[builtins.str]] = None,
        required_during_scheduling_ignored_during_execution: typing.Optional[typing.Sequence[builtins.str]] = None,
    ) -> None:
        '''Describes nodegroup affinity scheduling rules for the queue(e.g. putting pods of the queue in the nodes of the nodegroup).

        :param preferred_during_scheduling_ignored_during_execution: 
        :param required_during_scheduling_ignored_during_execution: 

        :schema: QueueSpecAffinityNodeGroupAffinity
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__8130fd7f61bec52621073da12ddbba26d16eb872597fb2364b1d93a94dc3f632)
            check_type(argname="argument preferred_during_scheduling_ignored_during_execution", value=preferred_during_scheduling_ignored_during_execution, expected_type=type_hints["preferred_during_scheduling_ignored_during_execution"])
            check_type(argname="argument required_during_scheduling_ignored_during_execution", value=required_during_scheduling_ignored_during_execution, expected_type=type_hints["required_during_scheduling_ignored_during_execution"])
        self._values: typing.Dict[builtins.str, typing.Any] = {}
        if preferred_during_scheduling_ignored_during_execution is not None:
            self._values["preferred_during_scheduling_ignored_during_execution"] = preferred_during_scheduling_ignored_during_execution
        if required_during_scheduling_ignored_during_execution is not None:
            self._values["required_during_scheduling_ignored_during_execution"] = required_during_scheduling_ignored_during_execution

    @builtins.property
    def preferred_during_scheduling_ignored_during_execution(
        self,
    ) -> typing.Optional[typing.List[builtins.str]]:
        '''
        :schema: QueueSpecAffinityNodeGroupAffinity#preferredDuringSchedulingIgnoredDuringExecution
        '''
        result = self._values.get("preferred_during_scheduling_ignored_during_execution")
        return typing.cast(typing.Optional[typing.List[builtins.str]], result)

    @builtins.property
    def required_during_scheduling_ignored_during_execution(
        self,
    ) -> typing.Optional[typing.List[builtins.str]]:
        '''
        :schema: QueueSpecAffinityNodeGroupAffinity#requiredDuringSchedulingIgnoredDuringExecution
        '''
        result = self._values.get("required_during_scheduling_ignored_during_execution")
        return typing.cast(typing.Optional[typing.List[builtins.str]], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "QueueSpecAffinityNodeGroupAffinity(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


@jsii.data_type(
    jsii_type="shvolcanoscheduling.QueueSpecAffinityNodeGroupAntiAffinity",
    jsii_struct_bases=[],
    name_mapping={
        "preferred_during_scheduling_ignored_during_execution": "preferredDuringSchedulingIgnoredDuringExecution",
        "required_during_scheduling_ignored_during_execution": "requiredDuringSchedulingIgnoredDuringExecution",
    },
)
class QueueSpecAffinityNodeGroupAntiAffinity:
    def __init__(
        self,
        *,
        preferred_during_scheduling_ignored_during_execution: typing.Optional[typing.Sequence[builtins.str]] = None,
        required_during_scheduling_ignored_during_execution: typing.Optional[typing.Sequence[builtins.str]] = None,
    ) -> None:
        '''Describes nodegroup anti-affinity scheduling rules for the queue(e.g. avoid putting pods of the queue in the nodes of the nodegroup).

        :param preferred_during_scheduling_ignored_during_execution: 
        :param required_during_scheduling_ignored_during_execution: 

        :schema: QueueSpecAffinityNodeGroupAntiAffinity
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__a1dcc987fc88c6eba5c233c7cbda301240ff8fc5dd5c9cfbeb5ba854f7fc85e9)
            check_type(argname="argument preferred_during_scheduling_ignored_during_execution", value=preferred_during_scheduling_ignored_during_execution, expected_type=type_hints["preferred_during_scheduling_ignored_during_execution"])
            check_type(argname="argument required_during_scheduling_ignored_during_execution", value=required_during_scheduling_ignored_during_execution, expected_type=type_hints["required_during_scheduling_ignored_during_execution"])
        self._values: typing.Dict[builtins.str, typing.Any] = {}
        if preferred_during_scheduling_ignored_during_execution is not None:
            self._values["preferred_during_scheduling_ignored_during_execution"] = preferred_during_scheduling_ignored_during_execution
        if required_during_scheduling_ignored_during_execution is not None:
            self._values["required_during_scheduling_ignored_during_execution"] = required_during_scheduling_ignored_during_execution

    @builtins.property
    def preferred_during_scheduling_ignored_during_execution(
        self,
    ) -> typing.Optional[typing.List[builtins.str]]:
        '''
        :schema: QueueSpecAffinityNodeGroupAntiAffinity#preferredDuringSchedulingIgnoredDuringExecution
        '''
        result = self._values.get("preferred_during_scheduling_ignored_during_execution")
        return typing.cast(typing.Optional[typing.List[builtins.str]], result)

    @builtins.property
    def required_during_scheduling_ignored_during_execution(
        self,
    ) -> typing.Optional[typing.List[builtins.str]]:
        '''
        :schema: QueueSpecAffinityNodeGroupAntiAffinity#requiredDuringSchedulingIgnoredDuringExecution
        '''
        result = self._values.get("required_during_scheduling_ignored_during_execution")
        return typing.cast(typing.Optional[typing.List[builtins.str]], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "QueueSpecAffinityNodeGroupAntiAffinity(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


class QueueSpecCapability(
    metaclass=jsii.JSIIMeta,
    jsii_type="shvolcanoscheduling.QueueSpecCapability",
):
    '''
    :schema: QueueSpecCapability
    '''

    @jsii.member(jsii_name="fromNumber")
    @builtins.classmethod
    def from_number(cls, value: jsii.Number) -> "QueueSpecCapability":
        '''
        :param value: -
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__847ce46380d3c6dbdeb551dc8689b125bb114322e1eec06a6a41c9a76d5ce880)
            check_type(argname="argument value", value=value, expected_type=type_hints["value"])
        return typing.cast("QueueSpecCapability", jsii.sinvoke(cls, "fromNumber", [value]))

    @jsii.member(jsii_name="fromString")
    @builtins.classmethod
    def from_string(cls, value: builtins.str) -> "QueueSpecCapability":
        '''
        :param value: -
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__e8b94a8c9c03b71a598c4d98b1fd16fdbfe1a9292d199c4462508a28e15948a3)
            check_type(argname="argument value", value=value, expected_type=type_hints["value"])
        return typing.cast("QueueSpecCapability", jsii.sinvoke(cls, "fromString", [value]))

    @builtins.property
    @jsii.member(jsii_name="value")
    def value(self) -> typing.Union[builtins.str, jsii.Number]:
        return typing.cast(typing.Union[builtins.str, jsii.Number], jsii.get(self, "value"))


@jsii.enum(jsii_type="shvolcanoscheduling.QueueSpecDequeueStrategy")
class QueueSpecDequeueStrategy(enum.Enum):
    '''DequeueStrategy defines the dequeue strategy of queue.

    :schema: QueueSpecDequeueStrategy
    '''

    FIFO = "FIFO"
    '''fifo.'''
    TRAVERSE = "TRAVERSE"
    '''traverse.'''


class QueueSpecDeserved(
    metaclass=jsii.JSIIMeta,
    jsii_type="shvolcanoscheduling.QueueSpecDeserved",
):
    '''
    :schema: QueueSpecDeserved
    '''

    @jsii.member(jsii_name="fromNumber")
    @builtins.classmethod
    def from_number(cls, value: jsii.Number) -> "QueueSpecDeserved":
        '''
        :param value: -
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__239f281f87ca8194adc9e89f2bf417eb67a91e6bfdd6bd37666856f354568cd2)
            check_type(argname="argument value", value=value, expected_type=type_hints["value"])
        return typing.cast("QueueSpecDeserved", jsii.sinvoke(cls, "fromNumber", [value]))

    @jsii.member(jsii_name="fromString")
    @builtins.classmethod
    def from_string(cls, value: builtins.str) -> "QueueSpecDeserved":
        '''
        :param value: -
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__e7965cd1ac96061e85cd805d57a6a595b3cffd7231f54e4d3810d3e5b7070e2f)
            check_type(argname="argument value", value=value, expected_type=type_hints["value"])
        return typing.cast("QueueSpecDeserved", jsii.sinvoke(cls, "fromString", [value]))

    @builtins.property
    @jsii.member(jsii_name="value")
    def value(self) -> typing.Union[builtins.str, jsii.Number]:
        return typing.cast(typing.Union[builtins.str, jsii.Number], jsii.get(self, "value"))


@jsii.data_type(
    jsii_type="shvolcanoscheduling.QueueSpecExtendClusters",
    jsii_struct_bases=[],
    name_mapping={"capacity": "capacity", "name": "name", "weight": "weight"},
)
class QueueSpecExtendClusters:
    def __init__(
        self,
        *,
        capacity: typing.Optional[typing.Mapping[builtins.str, "QueueSpecExtendClustersCapacity"]] = None,
        name: typing.Optional[builtins.str] = None,
        weight: typing.Optional[jsii.Number] = None,
    ) -> None:
        '''CluterSpec represents the template of Cluster.

        :param capacity: ResourceList is a set of (resource name, quantity) pairs.
        :param name: 
        :param weight: 

        :schema: QueueSpecExtendClusters
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__a5cbf53920f74f80c064ac09893e25a39ec724f10d7506124eeea581ebeeea9d)
            check_type(argname="argument capacity", value=capacity, expected_type=type_hints["capacity"])
            check_type(argname="argument name", value=name, expected_type=type_hints["name"])
            check_type(argname="argument weight", value=weight, expected_type=type_hints["weight"])
        self._values: typing.Dict[builtins.str, typing.Any] = {}
        if capacity is not None:
            self._values["capacity"] = capacity
        if name is not None:
            self._values["name"] = name
        if weight is not None:
            self._values["weight"] = weight

    @builtins.property
    def capacity(
        self,
    ) -> typing.Optional[typing.Mapping[builtins.str, "QueueSpecExtendClustersCapacity"]]:
        '''ResourceList is a set of (resource name, quantity) pairs.

        :schema: QueueSpecExtendClusters#capacity
        '''
        result = self._values.get("capacity")
        return typing.cast(typing.Optional[typing.Mapping[builtins.str, "QueueSpecExtendClustersCapacity"]], result)

    @builtins.property
    def name(self) -> typing.Optional[builtins.str]:
        '''
        :schema: QueueSpecExtendClusters#name
        '''
        result = self._values.get("name")
        return typing.cast(typing.Optional[builtins.str], result)

    @builtins.property
    def weight(self) -> typing.Optional[jsii.Number]:
        '''
        :schema: QueueSpecExtendClusters#weight
        '''
        result = self._values.get("weight")
        return typing.cast(typing.Optional[jsii.Number], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "QueueSpecExtendClusters(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


class QueueSpecExtendClustersCapacity(
    metaclass=jsii.JSIIMeta,
    jsii_type="shvolcanoscheduling.QueueSpecExtendClustersCapacity",
):
    '''
    :schema: QueueSpecExtendClustersCapacity
    '''

    @jsii.member(jsii_name="fromNumber")
    @builtins.classmethod
    def from_number(cls, value: jsii.Number) -> "QueueSpecExtendClustersCapacity":
        '''
        :param value: -
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__ba409d15c5402c036a6ded211599d0ee4e6c12a13b55b8115851bbae17c8fc79)
            check_type(argname="argument value", value=value, expected_type=type_hints["value"])
        return typing.cast("QueueSpecExtendClustersCapacity", jsii.sinvoke(cls, "fromNumber", [value]))

    @jsii.member(jsii_name="fromString")
    @builtins.classmethod
    def from_string(cls, value: builtins.str) -> "QueueSpecExtendClustersCapacity":
        '''
        :param value: -
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__d52898d8274d9e4857364846b221a81ae2646c87be05a63f49d3ea4f4533ebe1)
            check_type(argname="argument value", value=value, expected_type=type_hints["value"])
        return typing.cast("QueueSpecExtendClustersCapacity", jsii.sinvoke(cls, "fromString", [value]))

    @builtins.property
    @jsii.member(jsii_name="value")
    def value(self) -> typing.Union[builtins.str, jsii.Number]:
        return typing.cast(typing.Union[builtins.str, jsii.Number], jsii.get(self, "value"))


@jsii.data_type(
    jsii_type="shvolcanoscheduling.QueueSpecGuarantee",
    jsii_struct_bases=[],
    name_mapping={"resource": "resource"},
)
class QueueSpecGuarantee:
    def __init__(
        self,
        *,
        resource: typing.Optional[typing.Mapping[builtins.str, "QueueSpecGuaranteeResource"]] = None,
    ) -> None:
        '''Guarantee indicate configuration about resource reservation.

        :param resource: The amount of cluster resource reserved for queue. Just set either ``percentage`` or ``resource``

        :schema: QueueSpecGuarantee
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__00b1c660d507b52878ecc631fe545420c09f3bdbcdec6f0916297d5a046bbd6c)
            check_type(argname="argument resource", value=resource, expected_type=type_hints["resource"])
        self._values: typing.Dict[builtins.str, typing.Any] = {}
        if resource is not None:
            self._values["resource"] = resource

    @builtins.property
    def resource(
        self,
    ) -> typing.Optional[typing.Mapping[builtins.str, "QueueSpecGuaranteeResource"]]:
        '''The amount of cluster resource reserved for queue.

        Just set either ``percentage`` or ``resource``

        :schema: QueueSpecGuarantee#resource
        '''
        result = self._values.get("resource")
        return typing.cast(typing.Optional[typing.Mapping[builtins.str, "QueueSpecGuaranteeResource"]], result)

    def __eq__(self, rhs: typing.Any) -> builtins.bool:
        return isinstance(rhs, self.__class__) and rhs._values == self._values

    def __ne__(self, rhs: typing.Any) -> builtins.bool:
        return not (rhs == self)

    def __repr__(self) -> str:
        return "QueueSpecGuarantee(%s)" % ", ".join(
            k + "=" + repr(v) for k, v in self._values.items()
        )


class QueueSpecGuaranteeResource(
    metaclass=jsii.JSIIMeta,
    jsii_type="shvolcanoscheduling.QueueSpecGuaranteeResource",
):
    '''
    :schema: QueueSpecGuaranteeResource
    '''

    @jsii.member(jsii_name="fromNumber")
    @builtins.classmethod
    def from_number(cls, value: jsii.Number) -> "QueueSpecGuaranteeResource":
        '''
        :param value: -
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__290e6f0fc9c9731f3b66f029b1ed990f93503f8805f28b7e7621d4d307acd287)
            check_type(argname="argument value", value=value, expected_type=type_hints["value"])
        return typing.cast("QueueSpecGuaranteeResource", jsii.sinvoke(cls, "fromNumber", [value]))

    @jsii.member(jsii_name="fromString")
    @builtins.classmethod
    def from_string(cls, value: builtins.str) -> "QueueSpecGuaranteeResource":
        '''
        :param value: -
        '''
        if __debug__:
            type_hints = cached_type_hints(_typecheckingstub__107c2746321373f0b952c77ffb6db135c57cb56817df150c2e2994482087e854)
            check_type(argname="argument value", value=value, expected_type=type_hints["value"])
        return typing.cast("QueueSpecGuaranteeResource", jsii.sinvoke(cls, "fromString", [value]))

    @builtins.property
    @jsii.member(jsii_name="value")
    def value(self) -> typing.Union[builtins.str, jsii.Number]:
        return typing.cast(typing.Union[builtins.str, jsii.Number], jsii.get(self, "value"))


__all__ = [
    "PodGroup",
    "PodGroupProps",
    "PodGroupSpec",
    "PodGroupSpecMinResources",
    "PodGroupSpecNetworkTopology",
    "PodGroupSpecNetworkTopologyMode",
    "PodGroupSpecSubGroupPolicy",
    "PodGroupSpecSubGroupPolicyLabelSelector",
    "PodGroupSpecSubGroupPolicyLabelSelectorMatchExpressions",
    "PodGroupSpecSubGroupPolicyNetworkTopology",
    "PodGroupSpecSubGroupPolicyNetworkTopologyMode",
    "Queue",
    "QueueProps",
    "QueueSpec",
    "QueueSpecAffinity",
    "QueueSpecAffinityNodeGroupAffinity",
    "QueueSpecAffinityNodeGroupAntiAffinity",
    "QueueSpecCapability",
    "QueueSpecDequeueStrategy",
    "QueueSpecDeserved",
    "QueueSpecExtendClusters",
    "QueueSpecExtendClustersCapacity",
    "QueueSpecGuarantee",
    "QueueSpecGuaranteeResource",
]

publication.publish()

def _typecheckingstub__68f1667ad801eca5637211878aedca0c3c8a8afaf036e924029102752adf79c6(
    scope: _constructs_77d1e7e8.Construct,
    id: builtins.str,
    *,
    metadata: typing.Optional[typing.Union[_cdk8s_d3d9af27.ApiObjectMetadata, typing.Dict[builtins.str, typing.Any]]] = None,
    spec: typing.Optional[typing.Union[PodGroupSpec, typing.Dict[builtins.str, typing.Any]]] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__767f72e880f2ac0370b27b56d0066e5d818cbc90f10c6a6887241fd3aa865d00(
    *,
    metadata: typing.Optional[typing.Union[_cdk8s_d3d9af27.ApiObjectMetadata, typing.Dict[builtins.str, typing.Any]]] = None,
    spec: typing.Optional[typing.Union[PodGroupSpec, typing.Dict[builtins.str, typing.Any]]] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__909ddf824956ef6b268b8792dacedb7270fc28da3aa20704a47a82758ab100f2(
    *,
    min_member: typing.Optional[jsii.Number] = None,
    min_resources: typing.Optional[typing.Mapping[builtins.str, PodGroupSpecMinResources]] = None,
    min_task_member: typing.Optional[typing.Mapping[builtins.str, jsii.Number]] = None,
    network_topology: typing.Optional[typing.Union[PodGroupSpecNetworkTopology, typing.Dict[builtins.str, typing.Any]]] = None,
    priority_class_name: typing.Optional[builtins.str] = None,
    queue: typing.Optional[builtins.str] = None,
    sub_group_policy: typing.Optional[typing.Sequence[typing.Union[PodGroupSpecSubGroupPolicy, typing.Dict[builtins.str, typing.Any]]]] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__f632a04bef6b0898a239d4208961260d6d458d5368962af59f921a6ae86c2244(
    value: jsii.Number,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__b24e3a210a677993706934b51c1ee32e027a1100451a061f14d2ad188636c9f7(
    value: builtins.str,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__bf579303db03eb6d0703d3732d325b66d9556143a8367f6b4fb11c5521f0f7cb(
    *,
    highest_tier_allowed: typing.Optional[jsii.Number] = None,
    highest_tier_name: typing.Optional[builtins.str] = None,
    mode: typing.Optional[PodGroupSpecNetworkTopologyMode] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__d1275977681448ab37496f215bebe09b86860a5e2249a78ee263efe108cec81f(
    *,
    label_selector: typing.Optional[typing.Union[PodGroupSpecSubGroupPolicyLabelSelector, typing.Dict[builtins.str, typing.Any]]] = None,
    match_label_keys: typing.Optional[typing.Sequence[builtins.str]] = None,
    min_sub_groups: typing.Optional[jsii.Number] = None,
    name: typing.Optional[builtins.str] = None,
    network_topology: typing.Optional[typing.Union[PodGroupSpecSubGroupPolicyNetworkTopology, typing.Dict[builtins.str, typing.Any]]] = None,
    sub_group_size: typing.Optional[jsii.Number] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__c17e7bad3729f4d889672d89b134bb38f1bcba0560415e485f4238813c5140e0(
    *,
    match_expressions: typing.Optional[typing.Sequence[typing.Union[PodGroupSpecSubGroupPolicyLabelSelectorMatchExpressions, typing.Dict[builtins.str, typing.Any]]]] = None,
    match_labels: typing.Optional[typing.Mapping[builtins.str, builtins.str]] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__3dadafae203e4354d50286aa1324d47fb2932ba45193e5a042e0a6cb4c0509ca(
    *,
    key: builtins.str,
    operator: builtins.str,
    values: typing.Optional[typing.Sequence[builtins.str]] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__84a1ae60e5c199bcad6d40fcee0df8dca709a4feb398d8773c4fab8d120ceb20(
    *,
    highest_tier_allowed: typing.Optional[jsii.Number] = None,
    highest_tier_name: typing.Optional[builtins.str] = None,
    mode: typing.Optional[PodGroupSpecSubGroupPolicyNetworkTopologyMode] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__7e564604f4ec6f4d773a62f700346a75a5e370dce3710b09bc70e09aea29edf8(
    scope: _constructs_77d1e7e8.Construct,
    id: builtins.str,
    *,
    metadata: typing.Optional[typing.Union[_cdk8s_d3d9af27.ApiObjectMetadata, typing.Dict[builtins.str, typing.Any]]] = None,
    spec: typing.Optional[typing.Union[QueueSpec, typing.Dict[builtins.str, typing.Any]]] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__894bb2d2746e50ae008ae55c611b65949d26fc28c53588e562a41e0d6ef61c86(
    *,
    metadata: typing.Optional[typing.Union[_cdk8s_d3d9af27.ApiObjectMetadata, typing.Dict[builtins.str, typing.Any]]] = None,
    spec: typing.Optional[typing.Union[QueueSpec, typing.Dict[builtins.str, typing.Any]]] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__24ca07e5d7940dd36f4fb48ad96068a86efa1c324385ff21b481790993a88422(
    *,
    affinity: typing.Optional[typing.Union[QueueSpecAffinity, typing.Dict[builtins.str, typing.Any]]] = None,
    capability: typing.Optional[typing.Mapping[builtins.str, QueueSpecCapability]] = None,
    dequeue_strategy: typing.Optional[QueueSpecDequeueStrategy] = None,
    deserved: typing.Optional[typing.Mapping[builtins.str, QueueSpecDeserved]] = None,
    extend_clusters: typing.Optional[typing.Sequence[typing.Union[QueueSpecExtendClusters, typing.Dict[builtins.str, typing.Any]]]] = None,
    guarantee: typing.Optional[typing.Union[QueueSpecGuarantee, typing.Dict[builtins.str, typing.Any]]] = None,
    parent: typing.Optional[builtins.str] = None,
    priority: typing.Optional[jsii.Number] = None,
    reclaimable: typing.Optional[builtins.bool] = None,
    type: typing.Optional[builtins.str] = None,
    weight: typing.Optional[jsii.Number] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__d8fb5a7649e99de3fece1da9e2d4dfd57d10205bd9ee2b2248a5f5535367de96(
    *,
    node_group_affinity: typing.Optional[typing.Union[QueueSpecAffinityNodeGroupAffinity, typing.Dict[builtins.str, typing.Any]]] = None,
    node_group_anti_affinity: typing.Optional[typing.Union[QueueSpecAffinityNodeGroupAntiAffinity, typing.Dict[builtins.str, typing.Any]]] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__8130fd7f61bec52621073da12ddbba26d16eb872597fb2364b1d93a94dc3f632(
    *,
    preferred_during_scheduling_ignored_during_execution: typing.Optional[typing.Sequence[builtins.str]] = None,
    required_during_scheduling_ignored_during_execution: typing.Optional[typing.Sequence[builtins.str]] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__a1dcc987fc88c6eba5c233c7cbda301240ff8fc5dd5c9cfbeb5ba854f7fc85e9(
    *,
    preferred_during_scheduling_ignored_during_execution: typing.Optional[typing.Sequence[builtins.str]] = None,
    required_during_scheduling_ignored_during_execution: typing.Optional[typing.Sequence[builtins.str]] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__847ce46380d3c6dbdeb551dc8689b125bb114322e1eec06a6a41c9a76d5ce880(
    value: jsii.Number,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__e8b94a8c9c03b71a598c4d98b1fd16fdbfe1a9292d199c4462508a28e15948a3(
    value: builtins.str,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__239f281f87ca8194adc9e89f2bf417eb67a91e6bfdd6bd37666856f354568cd2(
    value: jsii.Number,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__e7965cd1ac96061e85cd805d57a6a595b3cffd7231f54e4d3810d3e5b7070e2f(
    value: builtins.str,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__a5cbf53920f74f80c064ac09893e25a39ec724f10d7506124eeea581ebeeea9d(
    *,
    capacity: typing.Optional[typing.Mapping[builtins.str, QueueSpecExtendClustersCapacity]] = None,
    name: typing.Optional[builtins.str] = None,
    weight: typing.Optional[jsii.Number] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__ba409d15c5402c036a6ded211599d0ee4e6c12a13b55b8115851bbae17c8fc79(
    value: jsii.Number,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__d52898d8274d9e4857364846b221a81ae2646c87be05a63f49d3ea4f4533ebe1(
    value: builtins.str,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__00b1c660d507b52878ecc631fe545420c09f3bdbcdec6f0916297d5a046bbd6c(
    *,
    resource: typing.Optional[typing.Mapping[builtins.str, QueueSpecGuaranteeResource]] = None,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__290e6f0fc9c9731f3b66f029b1ed990f93503f8805f28b7e7621d4d307acd287(
    value: jsii.Number,
) -> None:
    """Type checking stubs"""
    pass

def _typecheckingstub__107c2746321373f0b952c77ffb6db135c57cb56817df150c2e2994482087e854(
    value: builtins.str,
) -> None:
    """Type checking stubs"""
    pass
