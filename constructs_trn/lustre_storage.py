"""FSx for Lustre in the Trainium subnet: the data set, checkpoints and the Neuron compile cache."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

from aws_cdk import Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import custom_resources as cr
from constructs import Construct

from cluster_facts.deploy_timeouts import AWS_CUSTOM_RESOURCE_SERVICE_TIMEOUT
from constructs_trn.nag import acknowledge_custom_resource_function
from constructs_trn.security_groups import restricted_security_group

__all__ = ["LUSTRE_PORTS", "LustreStorage", "RootSquash", "lustre_nid_range"]

# Lustre clients reach the file servers on 988 (LNet) and 1018-1023 (the other Lustre services).
LUSTRE_PORTS = (ec2.Port.tcp(988), ec2.Port.tcp_range(1018, 1023))

_DEPLOYMENT_TYPES = {
    "SCRATCH_2": fsx.LustreDeploymentType.SCRATCH_2,
    "PERSISTENT_2": fsx.LustreDeploymentType.PERSISTENT_2,
}


def lustre_nid_range(cidr: str) -> str:
    """The clients of an IPv4 CIDR block as one Lustre NID range: ``10.0.64.0/18`` is
    ``10.0.[64-127].[0-255]@tcp`` (octets fully in the prefix fixed, the rest as ranges)."""
    network = ipaddress.IPv4Network(cidr)
    first, last = str(network.network_address).split("."), str(network.broadcast_address).split(".")
    octets = [low if low == high else f"[{low}-{high}]" for low, high in zip(first, last, strict=True)]
    return ".".join(octets) + "@tcp"


class RootSquash(Construct):
    """Lustre root squash on the file system: root on any client is ``squash_to`` (uid:gid), but on
    the clients of ``exempt_cidrs``, which stay root.

    CloudFormation's AWS::FSx::FileSystem has no RootSquashConfiguration (its LustreConfiguration
    stops at WeeklyMaintenanceStartTime; aws-cdk-lib and cfn-lint's schema agree), while the FSx API's
    UpdateFileSystem takes one on a live file system of any deployment type: a custom resource makes
    that call on create and whenever the setting changes, an in-place update of the file system.
    Deleting it leaves the squash on (the safe side); the file system goes with its own resource.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        file_system: fsx.LustreFileSystem,
        squash_to: str,
        exempt_cidrs: Sequence[str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.no_squash_nids = [lustre_nid_range(cidr) for cidr in exempt_cidrs]
        self.configuration = {"RootSquash": squash_to, "NoSquashNids": self.no_squash_nids}
        call = cr.AwsSdkCall(
            service="FSx",
            action="updateFileSystem",
            parameters={
                "FileSystemId": file_system.file_system_id,
                "LustreConfiguration": {"RootSquashConfiguration": self.configuration},
            },
            physical_resource_id=cr.PhysicalResourceId.of(f"{file_system.file_system_id}-root-squash"),
        )
        stack = Stack.of(self)
        self.resource = cr.AwsCustomResource(
            self,
            "Resource",
            resource_type="Custom::LustreRootSquash",
            install_latest_aws_sdk=False,
            service_timeout=Duration.seconds(AWS_CUSTOM_RESOURCE_SERVICE_TIMEOUT),
            on_create=call,
            on_update=call,
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [
                    iam.PolicyStatement(
                        actions=["fsx:UpdateFileSystem"],
                        resources=[
                            stack.format_arn(
                                service="fsx",
                                resource="file-system",
                                resource_name=file_system.file_system_id,
                            )
                        ],
                    )
                ]
            ),
        )
        acknowledge_custom_resource_function(stack)


def _export_buckets(
    exports: Mapping[str, str], *, persistent: bool, backups: bool, owner: str | None
) -> list[str]:
    """The one bucket ``exports`` go to (none without exports); a ValueError for what FSx refuses."""
    if exports and (not persistent or backups):
        raise ValueError("exports need a PERSISTENT_2 file system without automatic backups")
    buckets = sorted({_bucket_of(path) for path in exports.values()})
    if exports and (len(buckets) != 1 or owner is None):
        raise ValueError(f"exports go to one bucket of a named owner, not {buckets} of {owner}")
    return buckets


class LustreStorage(Construct):
    """A Lustre file system, its security group and, optionally, an S3 data repository.

    The security group admits the Lustre ports from the client groups; ``fsx.LustreFileSystem``
    itself opens 988-1023 within the group, for the file servers to talk to each other. It refers to no cluster resource, so CloudFormation creates the
    file system side by side with the EKS control plane.

    S3: a PERSISTENT_2 file system links the bucket through a data repository association mounted
    at ``/s3``; SCRATCH_2 imports it at creation (``import_path``), the only way it supports.

    Beyond the file system: ``backup_retention_days`` of FSx automatic daily backups, or ``exports``,
    a data repository association per directory (a team's) that exports each file to S3 as it is
    written. FSx takes backups only of a persistent file system linked to no S3 bucket ("Backups are
    supported only on FSx for Lustre persistent file systems that are not linked to an Amazon S3 data
    repository", FSx for Lustre user guide, "Protecting your data with backups"; "Data repositories
    cannot be linked to file systems that have file system backups enabled", "Linking your file system
    to an S3 bucket"): the configuration allows one or the other (config/model.py ``fsx.backups``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        client_security_groups: Sequence[ec2.ISecurityGroup],
        deployment_type: str,
        storage_capacity_gib: int,
        throughput_mib_per_tib: int | None,
        s3_import_path: str | None,
        s3_bucket_owner: str,
        removal_policy: RemovalPolicy,
        root_squash_to: str,
        root_squash_exempt_cidrs: Sequence[str],
        backup_retention_days: int = 0,
        backup_start_time_utc: str | None = None,
        exports: Mapping[str, str] | None = None,
        exports_owner: str | None = None,
    ) -> None:
        """``exports``: file system directory -> the S3 prefix it is exported to (``exports_owner``'s
        bucket, checked at deploy); ``backup_retention_days`` 0: no automatic backups."""
        super().__init__(scope, construct_id)
        persistent = deployment_type == "PERSISTENT_2"

        self.security_group = restricted_security_group(
            self, "SecurityGroup", vpc=vpc, description=f"{name}: FSx for Lustre"
        )
        self._allow_itself_outbound()
        self.allow_clients(*client_security_groups)

        self.kms_key = self._encryption_key(name, removal_policy) if persistent else None
        # FSx links any bucket it can read, whoever owns it; CloudFormation cannot ask. S3 can:
        # HeadBucket with ExpectedBucketOwner fails (403) for a bucket of another account, and the
        # file system links the bucket only after it succeeded.
        self.bucket_owner_check = (
            _bucket_owner_check(
                self, "S3BucketOwner", bucket=_bucket_of(s3_import_path), owner=s3_bucket_owner
            )
            if s3_import_path
            else None
        )
        exports = dict(exports or {})
        export_buckets = _export_buckets(
            exports, persistent=persistent, backups=bool(backup_retention_days), owner=exports_owner
        )
        self.file_system = fsx.LustreFileSystem(
            self,
            "FileSystem",
            vpc=vpc,
            vpc_subnet=subnet,
            security_group=self.security_group,
            storage_capacity_gib=storage_capacity_gib,
            file_system_type_version=fsx.FileSystemTypeVersion.V_2_15,
            kms_key=self.kms_key,
            removal_policy=removal_policy,
            lustre_configuration=fsx.LustreConfiguration(
                deployment_type=_DEPLOYMENT_TYPES[deployment_type],
                per_unit_storage_throughput=throughput_mib_per_tib,
                data_compression_type=fsx.LustreDataCompressionType.LZ4,
                import_path=None if persistent else s3_import_path,
                # Explicit on PERSISTENT_2, 0 included; SCRATCH_2 takes no backup setting at all.
                automatic_backup_retention=Duration.days(backup_retention_days) if persistent else None,
                daily_automatic_backup_start_time=_start_time(backup_start_time_utc),
                copy_tags_to_backups=True if backup_retention_days else None,
            ),
        )
        self.data_repository = self._s3_repository(s3_import_path) if persistent and s3_import_path else None
        self._add_exports(exports, buckets=export_buckets, owner=exports_owner)
        self._squash_root(root_squash_to, root_squash_exempt_cidrs)

        if self.bucket_owner_check is not None:
            # SCRATCH_2 imports at creation; PERSISTENT_2 links through the association.
            (self.data_repository or self.file_system).node.add_dependency(self.bucket_owner_check)

    def _add_exports(self, exports: Mapping[str, str], *, buckets: list[str], owner: str | None) -> None:
        """Each exported directory's association, after a check that the bucket is ``owner``'s."""
        self.export_owner_check = (
            _bucket_owner_check(self, "ExportBucketOwner", bucket=buckets[0], owner=owner)
            if exports and owner is not None
            else None
        )
        self.exports = {
            directory: self._export(directory, destination)
            for directory, destination in sorted(exports.items())
        }

    def _encryption_key(self, name: str, removal_policy: RemovalPolicy) -> kms.Key:
        """SCRATCH_2 is always encrypted with an FSx-owned key; PERSISTENT_2 takes a customer key."""
        return kms.Key(
            self,
            "Key",
            description=f"{name}: FSx for Lustre encryption at rest",
            enable_key_rotation=True,
            # The key goes with the file system: retained together, or scheduled for deletion
            # (KMS waits 30 days, during which the deletion can be cancelled) when it is destroyed.
            removal_policy=removal_policy,
        )

    def _s3_repository(self, s3_import_path: str) -> fsx.CfnDataRepositoryAssociation:
        """PERSISTENT_2 links the bucket through an association mounted at ``/s3``."""
        return fsx.CfnDataRepositoryAssociation(
            self,
            "S3DataRepository",
            file_system_id=self.file_system.file_system_id,
            file_system_path="/s3",
            data_repository_path=s3_import_path,
            batch_import_meta_data_on_create=True,
            s3=fsx.CfnDataRepositoryAssociation.S3Property(
                auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(
                    events=["NEW", "CHANGED", "DELETED"]
                )
            ),
        )

    def _squash_root(self, squash_to: str, exempt_cidrs: Sequence[str]) -> None:
        self.root_squash = RootSquash(
            self,
            "RootSquash",
            file_system=self.file_system,
            squash_to=squash_to,
            exempt_cidrs=exempt_cidrs,
        )
        # FSx runs one administrative action on a file system at a time: the associations first.
        for association in (self.data_repository, *self.exports.values()):
            if association is not None:
                self.root_squash.node.add_dependency(association)

    def _export(self, directory: str, destination: str) -> fsx.CfnDataRepositoryAssociation:
        """``directory`` exported to ``destination`` as files are created or changed there.

        Deleted files are not exported (no ``DELETED`` event): a checkpoint removed on the file system
        stays in S3, and with versioning on the bucket an overwritten one keeps its earlier version.
        On creation the association imports the metadata already under ``destination``: a new file
        system (a replaced one) finds the team's earlier checkpoints, loaded from S3 when read. FSx
        creates ``directory`` if it is missing, as it does for ``/s3``; the layout Job then hands it
        to its team (cluster_programs/fsx_layout.sh).
        """
        # The construct id is the team's directory: a team keeps its association across deploys.
        association = fsx.CfnDataRepositoryAssociation(
            self,
            f"Export{directory.replace('/', '-')}",
            file_system_id=self.file_system.file_system_id,
            file_system_path=directory,
            data_repository_path=destination,
            batch_import_meta_data_on_create=True,
            s3=fsx.CfnDataRepositoryAssociation.S3Property(
                auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(
                    events=["NEW", "CHANGED"]
                )
            ),
        )
        if self.export_owner_check is not None:
            association.node.add_dependency(self.export_owner_check)
        return association

    def _allow_itself_outbound(self) -> None:
        """Outbound Lustre ports to the file system's own group: its servers talk to each other.

        FSx for Lustre user guide, "File system access control with Amazon VPC": the group needs
        inbound 988 and 1018-1023 from itself and its clients, and outbound on the same ports to
        itself and its clients (FSx's examples assume the default allow-all outbound, which this
        group does not have). ``fsx.LustreFileSystem`` adds only the inbound self rule (988-1023)."""
        for port in LUSTRE_PORTS:
            self.security_group.add_egress_rule(self.security_group, port, "Lustre servers among themselves")

    def allow_clients(self, *client_security_groups: ec2.ISecurityGroup) -> None:
        """Admit Lustre traffic from these groups (rules of their own: the file system need not wait)."""
        for client in client_security_groups:
            for port in LUSTRE_PORTS:
                self.security_group.add_ingress_rule(client, port, "Lustre client")
                self.security_group.add_egress_rule(client, port, "Lustre client")

    @property
    def file_system_id(self) -> str:
        return self.file_system.file_system_id

    @property
    def mount_name(self) -> str:
        return self.file_system.mount_name

    @property
    def dns_name(self) -> str:
        return self.file_system.dns_name


def _bucket_of(s3_path: str) -> str:
    return s3_path.removeprefix("s3://").split("/", 1)[0]


def _start_time(start_utc: str | None) -> fsx.DailyAutomaticBackupStartTime | None:
    if start_utc is None:
        return None
    hour, minute = start_utc.split(":")
    return fsx.DailyAutomaticBackupStartTime(hour=int(hour), minute=int(minute))


def _bucket_owner_check(
    scope: Construct, construct_id: str, *, bucket: str, owner: str
) -> cr.AwsCustomResource:
    """A deploy-time check that ``bucket`` belongs to account ``owner``; it fails the deployment if not."""
    call = cr.AwsSdkCall(
        service="S3",
        action="headBucket",
        parameters={"Bucket": bucket, "ExpectedBucketOwner": owner},
        physical_resource_id=cr.PhysicalResourceId.of(f"{bucket}-owned-by-{owner}"),
    )
    check = cr.AwsCustomResource(
        scope,
        construct_id,
        resource_type="Custom::S3BucketOwner",
        install_latest_aws_sdk=False,
        service_timeout=Duration.seconds(AWS_CUSTOM_RESOURCE_SERVICE_TIMEOUT),
        on_create=call,
        on_update=call,
        policy=cr.AwsCustomResourcePolicy.from_statements(
            # HeadBucket is authorized by s3:ListBucket on the bucket.
            [iam.PolicyStatement(actions=["s3:ListBucket"], resources=[f"arn:{Aws.PARTITION}:s3:::{bucket}"])]
        ),
    )
    acknowledge_custom_resource_function(Stack.of(scope))
    return check
