"""TrainiumPipeline from config/pipeline.example.yaml, synthesized once per session as app.py builds it.

Read from the cloud assembly: the pipeline's CodePipeline stages and actions in order, the synth and
self-mutation commands, the Assets stage (run through the pinned cdk-assets), the approval and
security-check placement, each stage's TrainiumStack environment, the artifact store's keys, the
post-deployment checks, and cdk-nag's verdict.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import (
    DEPLOYMENT_CHECK_GROUP,
    EFA_INTERFACES_LABEL,
    NEURON_DEVICES_LABEL,
    NODE_GROUP_LABEL,
    trainium_node_labels,
)
from cluster_plan.deployment_check import CHECK_OUTPUTS, deployment_check_script
from config.pipeline import Pipeline, construct_id_of, load_pipeline
from constructs_trn.deployment_check_role import deployment_check_role_name
from constructs_trn.nag import add_aws_solutions_checks
from stacks.pipeline_stack import (
    STANDARD_8_RUNTIMES,
    SYNTH_CHECKS,
    SYNTH_INSTALL,
    TrainiumPipeline,
    pinned_assets_cli_version,
    pinned_cli_version,
)
from tests.conftest import REPO_ROOT, project_context
from tests.guardrails.reports import (
    acknowledgments_made,
    acknowledgments_used,
    cfn_lint,
    plugin_report,
    summary,
    violation_ids,
)
from tests.test_cli import cdk_synth, without_metadata
from tools.synth_report import describe

PIPELINE_FILE = "config/pipeline.example.yaml"


@dataclass(frozen=True)
class PipelineSynth:
    app: cdk.App
    stack: TrainiumPipeline
    pipeline: Pipeline
    outdir: Path

    def template(self, name: str = "TrainiumPipeline") -> dict[str, Any]:
        return dict(json.loads((self.outdir / f"{name}.template.json").read_text()))

    def resources(self, resource_type: str, template: str = "TrainiumPipeline") -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.template(template)["Resources"].items()
            if resource["Type"] == resource_type
        }

    @property
    def codepipeline(self) -> dict[str, Any]:
        (pipeline,) = self.resources("AWS::CodePipeline::Pipeline").values()
        return dict(pipeline["Properties"])

    def stage(self, name: str) -> list[dict[str, Any]]:
        (stage,) = [stage for stage in self.codepipeline["Stages"] if stage["Name"] == name]
        return list(stage["Actions"])

    def project(self, action: dict[str, Any]) -> dict[str, Any]:
        """The CodeBuild project a CodeBuild action runs."""
        logical_id = action["Configuration"]["ProjectName"]["Ref"]
        return dict(self.template()["Resources"][logical_id]["Properties"])

    def build_spec(self, action: dict[str, Any]) -> dict[str, Any]:
        return dict(json.loads(self.project(action)["Source"]["BuildSpec"]))


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> PipelineSynth:
    """app.py's pipeline branch, in process: feature flags, cdk-nag, the example pipeline file."""
    outdir = tmp_path_factory.mktemp("pipeline.out")
    app = cdk.App(context={**project_context(), "pipeline": PIPELINE_FILE}, outdir=str(outdir))
    add_aws_solutions_checks(app)
    pipeline = load_pipeline(REPO_ROOT / PIPELINE_FILE)
    stack = TrainiumPipeline(app, pipeline=pipeline, pipeline_file=PIPELINE_FILE)
    app.synth()
    return PipelineSynth(app=app, stack=stack, pipeline=pipeline, outdir=outdir)


def actions_of(synth: PipelineSynth, wave: str, environment: str) -> dict[str, dict[str, Any]]:
    """The actions of one environment's stage in its wave, by name without the stage prefix."""
    wave_settings = next(settings for settings in synth.pipeline.settings.waves if settings.name == wave)
    actions = synth.stage(construct_id_of(wave))
    if len(wave_settings.environments) == 1:
        return {action["Name"]: action for action in actions}
    prefix = f"{construct_id_of(environment)}."
    return {
        action["Name"].removeprefix(prefix): action for action in actions if action["Name"].startswith(prefix)
    }


def test_stages_run_source_build_update_assets_then_the_waves_in_file_order(synth: PipelineSynth) -> None:
    names = [stage["Name"] for stage in synth.codepipeline["Stages"]]
    assert names == ["Source", "Build", "UpdatePipeline", "Assets", "Dev", "Staging", "Production"]
    assert synth.codepipeline["Name"] == "trainium"
    assert synth.codepipeline["PipelineType"] == "V2"


def test_source_is_the_connection_repository_and_branch(synth: PipelineSynth) -> None:
    (action,) = synth.stage("Source")
    assert action["ActionTypeId"]["Provider"] == "CodeStarSourceConnection"
    source = synth.pipeline.settings.source
    assert action["Configuration"]["ConnectionArn"] == source.connection_arn
    assert action["Configuration"]["FullRepositoryId"] == source.repository
    assert action["Configuration"]["BranchName"] == source.branch


def test_synth_installs_through_make_then_checks_then_synthesizes_this_pipeline_file(
    synth: PipelineSynth,
) -> None:
    (action,) = synth.stage("Build")
    spec = synth.build_spec(action)
    assert spec["phases"]["install"]["commands"] == ["make deploy-setup"]
    assert spec["phases"]["install"]["runtime-versions"] == {"python": "3.11", "nodejs": "24"}
    assert spec["phases"]["build"]["commands"] == [
        "make deploy-checks",
        f"make synth PIPELINE={PIPELINE_FILE}",
    ]
    assert spec["artifacts"]["base-directory"] == "cdk.out"
    project = synth.project(action)
    environment = project["Environment"]
    assert environment["Image"] == "aws/codebuild/standard:8.0"
    assert environment["PrivilegedMode"] is False
    assert (environment["ComputeType"], project["TimeoutInMinutes"]) == ("BUILD_GENERAL1_MEDIUM", 30)


def test_the_build_names_runtimes_the_image_documents(synth: PipelineSynth) -> None:
    """Every runtime-versions entry of every CodeBuild project is one standard:8.0 offers (a runtime the
    image lacks fails the install phase); the synth needs no Go runtime: the cluster tier is not run."""
    specs = [
        json.loads(project["Properties"]["Source"]["BuildSpec"])
        for project in synth.resources("AWS::CodeBuild::Project").values()
        if isinstance(project["Properties"]["Source"].get("BuildSpec"), str)
    ]
    declared = [spec.get("phases", {}).get("install", {}).get("runtime-versions") for spec in specs]
    for runtimes in filter(None, declared):
        for runtime, version in runtimes.items():
            assert version in STANDARD_8_RUNTIMES[runtime], (runtime, version)
    assert all("golang" not in runtimes for runtimes in filter(None, declared))


def test_the_synth_caches_pip_and_npm_downloads_in_the_artifact_bucket(synth: PipelineSynth) -> None:
    (action,) = synth.stage("Build")
    project = synth.project(action)
    assert project["Cache"]["Type"] == "S3"
    bucket = synth.stack.resolve(synth.stack.artifact_bucket.bucket_name)
    assert project["Cache"]["Location"] == {"Fn::Join": ["/", [bucket, "build-cache/synth"]]}
    assert synth.build_spec(action)["cache"]["paths"] == [
        "/root/.cache/pip/**/*",
        "/root/.npm/**/*",
        ".mypy_cache/**/*",
    ]


@pytest.mark.process
def test_the_deployment_checks_build_no_runtime_or_cluster_tier() -> None:
    """What the build's two make targets would run (make -n): no PyTorch, TorchX, Go or cluster tier."""
    if shutil.which("make") is None:
        pytest.skip("no make")
    commands = subprocess.run(
        ["make", "-n", "-B", *SYNTH_INSTALL[0].split()[1:], *SYNTH_CHECKS[0].split()[1:]],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for absent in (
        ".venv-torch",
        ".venv-torchx",
        "cluster_binaries",
        "go build",
        "tests/runtime",
        "tests/cluster",
    ):
        assert absent not in commands
    for present in (
        "requirements-dev.lock",
        "npm ci",
        "requirements-checkov.lock",
        '-m "not slow"',
        "tests/guardrails",
    ):
        assert present in commands


def test_self_mutation_and_the_security_check_use_the_pinned_cli(synth: PipelineSynth) -> None:
    version = pinned_cli_version()
    lock = json.loads((REPO_ROOT / "package-lock.json").read_text())
    assert version == lock["packages"]["node_modules/aws-cdk"]["version"]
    (update,) = synth.stage("UpdatePipeline")
    spec = synth.build_spec(update)
    assert spec["phases"]["install"]["commands"] == [f"npm install -g aws-cdk@{version}"]
    assert spec["phases"]["build"]["commands"] == [
        "cdk -a . deploy TrainiumPipeline --require-approval=never --verbose"
    ]
    checks = [
        project["Properties"]
        for logical_id, project in synth.resources("AWS::CodeBuild::Project").items()
        if "PipelinesSecurityCheck" in logical_id
    ]
    (check,) = checks
    build_spec = json.dumps(check["Source"]["BuildSpec"])
    assert f"npm install -g aws-cdk@{version}" in build_spec
    assert 'npm install -g aws-cdk\\\\"' not in build_spec.replace(f"aws-cdk@{version}", "")
    assert check["Environment"]["Image"] == "aws/codebuild/standard:8.0"


CDK_ASSETS = REPO_ROOT / "node_modules" / ".bin" / "cdk-assets"


def asset_publications(synth: PipelineSynth) -> list[tuple[str, str]]:
    """(asset manifest path, destination selector) of every ``cdk-assets publish`` in the Assets stage."""
    publications = []
    for action in synth.stage("Assets"):
        spec = synth.build_spec(action)
        assert spec["phases"]["install"]["commands"] == [
            f"npm install -g cdk-assets@{pinned_assets_cli_version()}"
        ]
        for command in spec["phases"]["build"]["commands"]:
            program, path_flag, path, verbose, verb, selector = shlex.split(command)
            assert (program, path_flag, verbose, verb) == ("cdk-assets", "--path", "--verbose", "publish")
            publications.append((path, selector))
    return publications


def test_the_assets_stage_publishes_every_stage_asset_with_the_pinned_cdk_assets(
    synth: PipelineSynth,
) -> None:
    """The pinned cdk-assets (the one the Assets stage installs) reads each manifest and finds each asset.

    This is the Assets stage's own reading of the assembly, run offline: a cdk-assets that cannot
    read aws-cdk-lib's cloud-assembly schema fails here just as it would in CodeBuild.
    """
    lock = json.loads((REPO_ROOT / "package-lock.json").read_text())
    assert pinned_assets_cli_version() == lock["packages"]["node_modules/cdk-assets"]["version"]
    publications = asset_publications(synth)
    listings: dict[str, str] = {}
    for path in sorted({path for path, _ in publications}):
        # CodeBuild runs the commands in the synth output's root: cdk.out, here the session's outdir.
        result = subprocess.run(
            [str(CDK_ASSETS), "--path", path, "ls"],
            cwd=synth.outdir,
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, f"cdk-assets cannot read {path}: {result.stderr.strip()}"
        listings[path] = result.stdout
    for path, selector in publications:
        assert f"\u2514 {selector} " in listings[path], f"{selector} is not an asset destination of {path}"
    published_manifests = {path.split("/")[0] for path in listings}
    assert published_manifests == {f"assembly-{stage.stage_name}" for stage in synth.stack.stages.values()}
    # Every file asset of every stage goes to its own account's bootstrap bucket, nowhere else.
    for stage in synth.stack.stages.values():
        (manifest,) = [path for path in listings if path.startswith(f"assembly-{stage.stage_name}/")]
        destinations = {selector.split(":")[1] for path, selector in publications if path == manifest}
        assert {destination.rsplit("-", 1)[0] for destination in destinations} == {
            f"{stage.config.account}-{stage.config.region}"
        }


def test_production_waves_check_permissions_then_wait_for_approval_before_executing(
    synth: PipelineSynth,
) -> None:
    for wave, environment, _ in synth.pipeline.stages():
        actions = actions_of(synth, wave.name, environment.name)
        order = {name: action["RunOrder"] for name, action in actions.items()}
        approvals = sorted(
            name for name, action in actions.items() if action["ActionTypeId"]["Category"] == "Approval"
        )
        if wave.production:
            assert approvals == ["SecurityCheck.Confirm", "TrainiumStack.Approve"]
            assert (
                order["SecurityCheck.Check"]
                < order["SecurityCheck.Confirm"]
                < order["TrainiumStack.Prepare"]
                < order["TrainiumStack.Approve"]
                < order["TrainiumStack.Deploy"]
                < order["DeploymentCheck"]
            )
            assert actions["TrainiumStack.Prepare"]["Configuration"]["ActionMode"] == "CHANGE_SET_REPLACE"
            assert actions["TrainiumStack.Deploy"]["Configuration"]["ActionMode"] == "CHANGE_SET_EXECUTE"
            comment = actions["TrainiumStack.Approve"]["Configuration"]["CustomData"]
            assert f"{construct_id_of(environment.name)}-TrainiumStack" in comment
            assert "PipelineChange" in comment
        else:
            assert approvals == []
            assert not any(name.startswith("SecurityCheck") for name in actions)
            assert order["TrainiumStack.Prepare"] < order["TrainiumStack.Deploy"] < order["DeploymentCheck"]


def test_each_stage_deploys_trainium_stack_to_its_account_and_region(synth: PipelineSynth) -> None:
    root = json.loads((synth.outdir / "manifest.json").read_text())
    pipeline_artifact = root["artifacts"]["TrainiumPipeline"]
    assert pipeline_artifact["environment"] == "aws://444444444444/us-west-2"
    deployed = []
    for wave, environment, config in synth.pipeline.stages():
        stage_id = construct_id_of(environment.name)
        assert root["artifacts"][f"assembly-{stage_id}"]["type"] == "cdk:cloud-assembly"
        nested = json.loads((synth.outdir / f"assembly-{stage_id}" / "manifest.json").read_text())
        (stack,) = [
            artifact
            for artifact in nested["artifacts"].values()
            if artifact["type"] == "aws:cloudformation:stack"
        ]
        assert stack["environment"] == f"aws://{environment.account}/{environment.region}"
        assert (config.account, config.region) == (environment.account, environment.region)
        assert stack["properties"]["stackName"] == f"{stage_id}-TrainiumStack"
        deployed.append((wave.name, stack["environment"]))
    assert deployed == [
        ("dev", "aws://111111111111/us-west-2"),
        ("staging", "aws://222222222222/us-east-1"),
        ("production", "aws://333333333333/us-east-1"),
        ("production", "aws://333333333333/us-west-2"),
    ]


def test_deploy_actions_assume_the_target_accounts_bootstrap_roles(synth: PipelineSynth) -> None:
    for wave, environment, _ in synth.pipeline.stages():
        prepare = actions_of(synth, wave.name, environment.name)["TrainiumStack.Prepare"]
        role = json.dumps(prepare["RoleArn"])
        assert (
            f"iam::{environment.account}:role/cdk-hnb659fds-deploy-role-{environment.account}-{environment.region}"
            in role
        )
        expected_region = None if environment.region == "us-west-2" else environment.region
        assert prepare.get("Region") == expected_region


def test_no_context_lookups_anywhere(synth: PipelineSynth) -> None:
    manifests = [synth.outdir / "manifest.json", *synth.outdir.glob("assembly-*/manifest.json")]
    assert len(manifests) == 1 + 4
    for manifest in manifests:
        assert "missing" not in json.loads(manifest.read_text()), manifest


def test_cross_account_keys_encrypt_every_artifact_store(synth: PipelineSynth) -> None:
    stores = {store["Region"]: store["ArtifactStore"] for store in synth.codepipeline["ArtifactStores"]}
    assert set(stores) == {"us-west-2", "us-east-1"}
    assert all(store["EncryptionKey"]["Type"] == "KMS" for store in stores.values())
    key_id = stores["us-west-2"]["EncryptionKey"]["Id"]["Fn::GetAtt"][0]
    key = synth.template()["Resources"][key_id]
    assert key["Type"] == "AWS::KMS::Key"
    assert key["Properties"]["EnableKeyRotation"] is True
    bucket = synth.template()["Resources"][stores["us-west-2"]["Location"]["Ref"]]["Properties"]
    (rule,) = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    assert rule["ServerSideEncryptionByDefault"]["KMSMasterKeyID"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    assert "LoggingConfiguration" in bucket
    replication = synth.resources("AWS::KMS::Key", "cross-region-stack-444444444444_us-east-1")
    assert [key["Properties"]["EnableKeyRotation"] for key in replication.values()] == [True]


def test_every_stage_ends_with_a_deployment_check_on_the_stack_outputs(synth: PipelineSynth) -> None:
    for wave, environment, config in synth.pipeline.stages():
        check = actions_of(synth, wave.name, environment.name)["DeploymentCheck"]
        stack_namespace = actions_of(synth, wave.name, environment.name)["TrainiumStack.Deploy"]["Namespace"]
        variables = {
            item["name"]: item["value"] for item in json.loads(check["Configuration"]["EnvironmentVariables"])
        }
        assert variables == {
            variable: f"#{{{stack_namespace}.{output}}}" for variable, output in CHECK_OUTPUTS.items()
        }
        project = synth.project(check)
        plain = {item["Name"]: item["Value"] for item in project["Environment"]["EnvironmentVariables"]}
        role_name = deployment_check_role_name(config.name, config.region)
        assert plain["CHECK_ROLE_ARN"] == f"arn:aws:iam::{config.account}:role/{role_name}"
        assert plain["EXPECTED_CLUSTER_NAME"] == config.name
        assert plain["TARGET_REGION"] == config.region
        assert plain["CHECK_KUBERNETES"] == ("true" if config.cluster.endpoint_public_cidrs else "false")
        assert plain["TRAINIUM_NODE_GROUPS"] == " ".join(
            f"{group.name}:{group.instance.efa_interfaces}" for group in config.trainium.node_groups
        )
        spec = synth.build_spec(check)
        assert spec["env"]["shell"] == "bash"
        (command,) = spec["phases"]["build"]["commands"]
        assert command == deployment_check_script()
        assert plain["NEURON_RESOURCE"] == "aws.amazon.com/neuron"
        assert plain["EFA_RESOURCE"] == "vpc.amazonaws.com/efa"


def test_every_deployment_check_leaves_through_the_one_fixed_egress_address(synth: PipelineSynth) -> None:
    """No API server need admit CodeBuild's shared ranges: the checks run in the pipeline's VPC, whose
    private subnets route to the internet only through one NAT gateway and its Elastic IP, the
    DeploymentCheckEgressCidr output an environment admits in cluster.endpoint_public_cidrs."""
    template = synth.template()
    resources = template["Resources"]
    [(eip_id, _)] = synth.resources("AWS::EC2::EIP").items()
    [(nat_id, nat)] = synth.resources("AWS::EC2::NatGateway").items()
    assert nat["Properties"]["AllocationId"] == {"Fn::GetAtt": [eip_id, "AllocationId"]}
    output = template["Outputs"]["DeploymentCheckEgressCidr"]
    assert output["Value"] == {"Fn::Join": ["", [{"Ref": eip_id}, "/32"]]}
    private_subnets = {
        logical_id
        for logical_id, subnet in synth.resources("AWS::EC2::Subnet").items()
        if not subnet["Properties"]["MapPublicIpOnLaunch"]
    }
    assert private_subnets
    routes = [
        route["Properties"]
        for route in synth.resources("AWS::EC2::Route").values()
        if route["Properties"].get("DestinationCidrBlock") == "0.0.0.0/0"
        and "NatGatewayId" in route["Properties"]
    ]
    assert [route["NatGatewayId"] for route in routes] == [{"Ref": nat_id}]
    for wave, environment, _ in synth.pipeline.stages():
        project = synth.project(actions_of(synth, wave.name, environment.name)["DeploymentCheck"])
        subnets = {subnet["Ref"] for subnet in project["VpcConfig"]["Subnets"]}
        assert subnets == private_subnets, environment.name
        assert {"Ref": resources[next(iter(subnets))]["Properties"]["VpcId"]["Ref"]} == project["VpcConfig"][
            "VpcId"
        ]


def test_the_check_role_assumes_exactly_the_stages_read_only_roles(synth: PipelineSynth) -> None:
    roles = synth.resources("AWS::IAM::Role")
    (check_role_id,) = [
        logical_id
        for logical_id, role in roles.items()
        if role["Properties"].get("RoleName") == "trainium-deployment-check"
    ]
    policies = [
        policy["Properties"]["PolicyDocument"]["Statement"]
        for policy in synth.resources("AWS::IAM::Policy").values()
        if {"Ref": check_role_id} in policy["Properties"]["Roles"]
    ]
    assume = [
        statement["Resource"]
        for statements in policies
        for statement in statements
        if statement["Action"] == "sts:AssumeRole"
    ]
    assert assume == [
        [
            f"arn:aws:iam::{config.account}:role/{deployment_check_role_name(config.name, config.region)}"
            for _, _, config in synth.pipeline.stages()
        ]
    ]


def test_each_stage_grants_the_check_read_only_access_in_its_account(synth: PipelineSynth) -> None:
    for _, environment, config in synth.pipeline.stages():
        stage = synth.stack.stages[environment.name]
        template = json.loads(
            (
                synth.outdir / f"assembly-{construct_id_of(environment.name)}" / stage.stack.template_file
            ).read_text()
        )
        resources = template["Resources"]
        (role,) = [
            resource["Properties"]
            for resource in resources.values()
            if resource["Type"] == "AWS::IAM::Role"
            and resource["Properties"].get("RoleName")
            == deployment_check_role_name(config.name, config.region)
        ]
        (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"AWS": "arn:aws:iam::444444444444:root"}
        assert trust["Condition"]["ArnEquals"]["aws:PrincipalArn"] == {
            "Fn::Join": [
                "",
                ["arn:", {"Ref": "AWS::Partition"}, ":iam::444444444444:role/trainium-deployment-check"],
            ]
        }
        (entry,) = [
            resource["Properties"]
            for resource in resources.values()
            if resource["Type"] == "AWS::EKS::AccessEntry" and resource["Properties"].get("KubernetesGroups")
        ]
        assert entry["KubernetesGroups"] == [DEPLOYMENT_CHECK_GROUP]
        assert "AccessPolicies" not in entry
        (rbac,) = [
            json.loads(resource["Properties"]["Manifest"])
            for resource in resources.values()
            if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
            and DEPLOYMENT_CHECK_GROUP in resource["Properties"]["Manifest"]
        ]
        cluster_role = next(item for item in rbac if item["kind"] == "ClusterRole")
        assert cluster_role["rules"] == [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}
        ]
        # In the autoscaler's namespace: its Deployment and status ConfigMap, by name, get only.
        role = next(item for item in rbac if item["kind"] == "Role")
        assert role["metadata"]["namespace"] == "kube-system"
        assert role["rules"] == [
            {
                "apiGroups": ["apps"],
                "resources": ["deployments"],
                "resourceNames": ["cluster-autoscaler"],
                "verbs": ["get"],
            },
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": ["cluster-autoscaler-status"],
                "verbs": ["get"],
            },
        ]
        actions = sorted(
            action
            for policy in resources.values()
            if policy["Type"] == "AWS::IAM::Policy"
            and "DeploymentCheck" in json.dumps(policy["Properties"]["Roles"])
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]
            for action in (
                [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
            )
        )
        assert actions == [
            "autoscaling:DescribeAutoScalingGroups",
            "ec2:DescribeInstances",
            "eks:DescribeCluster",
            "eks:DescribeNodegroup",
        ]


def test_the_check_reads_the_labels_the_node_groups_carry() -> None:
    labels = trainium_node_labels(CATALOG["trn1.32xlarge"], node_group="group")
    assert {NODE_GROUP_LABEL, NEURON_DEVICES_LABEL, EFA_INTERFACES_LABEL} <= set(labels)
    assert labels[NEURON_DEVICES_LABEL] == "16"
    assert labels[EFA_INTERFACES_LABEL] == "8"


def test_the_pipeline_passes_aws_solutions_with_every_acknowledgment_used(synth: PipelineSynth) -> None:
    report = plugin_report(synth.outdir)
    assert report["conclusion"] == "success"
    assert violation_ids(report) == set()
    made = acknowledgments_made(synth.stack)
    for child in synth.app.node.children:
        if isinstance(child, cdk.Stack) and child.node.id.startswith("cross-region-stack-"):
            made |= acknowledgments_made(child)
    for stage in synth.stack.stages.values():
        made |= acknowledgments_made(stage.stack.deployment_check)  # type: ignore[arg-type]
    used = acknowledgments_used(report)
    ours = {
        entry
        for entry in used
        if entry[0].startswith(("TrainiumPipeline", "cross-region-stack-")) or "/DeploymentCheck" in entry[0]
    }
    assert made == ours
    for entry in report["suppressedViolations"]:
        if entry["acknowledgedAt"].startswith("TrainiumPipeline"):
            assert len(entry["reason"]) >= 60, entry


@pytest.fixture(scope="module")
def cli_synth(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`make synth PIPELINE=config/pipeline.example.yaml`, as the pipeline's synth step runs it, offline."""
    output = tmp_path_factory.mktemp("pipeline-cli.out")
    return cdk_synth_pipeline(PIPELINE_FILE, output), output


def cdk_synth_pipeline(pipeline_file: str | Path, output: Path) -> subprocess.CompletedProcess[str]:
    return cdk_synth("config/default.yaml", output, pipeline=pipeline_file)


def test_the_cli_synthesizes_the_pipeline_and_its_stages_offline(
    cli_synth: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, output = cli_synth
    assert result.returncode == 0, result.stderr
    manifest = json.loads((output / "manifest.json").read_text())
    assert "missing" not in manifest
    stacks = sorted(
        name
        for name, artifact in manifest["artifacts"].items()
        if artifact["type"] == "aws:cloudformation:stack"
    )
    assert stacks == ["TrainiumPipeline", "cross-region-stack-444444444444_us-east-1"]
    for stage in ("Dev", "Staging", "ProdUsEast1", "ProdUsWest2"):
        nested = json.loads((output / f"assembly-{stage}" / "manifest.json").read_text())
        assert "missing" not in nested
        assert len(list((output / f"assembly-{stage}").glob(f"{stage}TrainiumStack*.template.json"))) == 1
    assert not (output / "TrainiumStack.template.json").exists(), (
        "pipeline mode builds no plain TrainiumStack"
    )
    assert not (output / "k8s").exists()


def test_the_cli_writes_one_summary_per_stage_named_by_its_stack(
    cli_synth: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, output = cli_synth
    stages = ("Dev", "Staging", "ProdUsEast1", "ProdUsWest2")
    assert sorted(path.name for path in (output / "summary").iterdir()) == sorted(
        f"{stage}-TrainiumStack.md" for stage in stages
    )
    assert describe(output) == (
        f"wrote {output}/: TrainiumPipeline.template.json, "
        "cross-region-stack-444444444444_us-east-1.template.json, "
        f"4 stages in {', '.join(f'assembly-{stage}/' for stage in stages)}, "
        f"4 summaries in {output}/summary/"
    )


def test_the_cli_templates_equal_the_in_process_ones(
    cli_synth: tuple[subprocess.CompletedProcess[str], Path], synth: PipelineSynth
) -> None:
    """Deterministic: another process, another run, the same templates (path metadata aside)."""
    _, output = cli_synth
    templates = sorted(path.relative_to(synth.outdir) for path in synth.outdir.rglob("*.template.json"))
    assert templates == sorted(path.relative_to(output) for path in output.rglob("*.template.json"))
    for template in templates:
        from_cli = json.loads((output / template).read_text())
        in_process = json.loads((synth.outdir / template).read_text())
        assert without_metadata(from_cli) == without_metadata(in_process), template


def test_pipeline_templates_pass_cfn_lint(cli_synth: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """The templates the pipeline deploys (path metadata included, as cfn-lint expects of CDK output)."""
    _, output = cli_synth
    templates = [
        output / "TrainiumPipeline.template.json",
        *output.glob("cross-region-stack-*.template.json"),
        *output.glob("assembly-*/*.template.json"),
    ]
    assert len(templates) == 1 + 1 + 4
    assert summary(cfn_lint(*templates)) == []


def test_a_bad_pipeline_file_fails_the_cli_with_one_line_per_problem(tmp_path: Path) -> None:
    bad = tmp_path / "pipeline.yaml"
    text = (REPO_ROOT / PIPELINE_FILE).read_text()
    bad.write_text(text.replace("approval: manual\n", "approval: none\n").replace('"444444444444"', '"4444"'))
    output = tmp_path / "cdk.out"
    result = cdk_synth_pipeline(bad, output)
    assert result.returncode != 0
    assert f"{bad}: tooling.account: '4444' is not a 12-digit AWS account id" in result.stderr
    assert f"{bad}: waves[2].approval: a production wave needs approval: manual, got 'none'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(output.glob("**/*.template.json"))


def test_a_stage_with_the_fabric_check_gives_its_check_the_jobs_the_rights_and_the_time(
    tmp_path: Path,
) -> None:
    """dev with fabric_check.pipeline: the check step reads the synth output (the Jobs' JSON), its
    CodeBuild limit covers the bounded wait, and the stage's RBAC for it follows the fabric-checks step."""
    import shutil  # noqa: PLC0415

    import yaml  # noqa: PLC0415

    from cluster_plan.review_files import write_fabric_check_jobs  # noqa: PLC0415

    shutil.copytree(REPO_ROOT / "config" / "environments", tmp_path / "environments")
    shutil.copy(REPO_ROOT / PIPELINE_FILE, tmp_path / "pipeline.yaml")
    dev = tmp_path / "environments" / "dev.yaml"
    data = yaml.safe_load(dev.read_text())
    data["fabric_check"] = {"pipeline": True}
    dev.write_text(yaml.safe_dump(data))
    pipeline = load_pipeline(tmp_path / "pipeline.yaml")
    outdir = tmp_path / "out"
    app = cdk.App(context=project_context(), outdir=str(outdir))
    stack = TrainiumPipeline(app, pipeline=pipeline, pipeline_file="pipeline.yaml")
    app.synth()
    checked = PipelineSynth(app=app, stack=stack, pipeline=pipeline, outdir=outdir)
    [written] = write_fabric_check_jobs(
        pipeline.environments["dev"], stage_id=stack.stages["dev"].stage_name, outdir=outdir
    )
    assert written.relative_to(outdir).as_posix() == "fabric-check/Dev/fabric-check-trn1-32xl.json"

    check = actions_of(checked, "dev", "dev")["DeploymentCheck"]
    synth_output = checked.stage("Build")[0]["OutputArtifacts"][0]["Name"]
    assert [artifact["Name"] for artifact in check["InputArtifacts"]] == [synth_output]
    project = checked.project(check)
    plain = {item["Name"]: item["Value"] for item in project["Environment"]["EnvironmentVariables"]}
    assert (plain["FABRIC_CHECK"], plain["FABRIC_CHECK_JOBS"]) == (
        "true",
        "fabric-check/Dev/fabric-check-trn1-32xl.json",
    )
    assert project["TimeoutInMinutes"] == 30 + 80
    # Another stage keeps its check as it was: no input, 30 minutes, no fabric check.
    staging = checked.project(actions_of(checked, "staging", "staging")["DeploymentCheck"])
    assert staging["TimeoutInMinutes"] == 30
    assert {item["Name"]: item["Value"] for item in staging["Environment"]["EnvironmentVariables"]}[
        "FABRIC_CHECK"
    ] == "false"
    # The stage's check may run exactly that job, once the fabric-checks step has made its namespace ready.
    [template_file] = (outdir / "assembly-Dev").glob("DevTrainiumStack*.template.json")
    resources = json.loads(template_file.read_text())["Resources"]
    [(rbac_id, rbac)] = [
        (logical_id, resource)
        for logical_id, resource in resources.items()
        if "fabric-check-trn1-32xl-launcher-0" in json.dumps(resource) and "pods/log" in json.dumps(resource)
    ]
    # The check's RBAC carries its own fence (the policy on the Jobs it may create); the fabric
    # check's access (its taint policy) is another step, which the RBAC waits for.
    assert "trainium-deployment-check-volcano-jobs" in json.dumps(rbac)
    [access] = [
        logical_id
        for logical_id, resource in resources.items()
        if logical_id != rbac_id
        and "ValidatingAdmissionPolicy" in json.dumps(resource)
        and "fabric-check-trn1-32xl" in json.dumps(resource)
    ]
    assert access in rbac.get("DependsOn", [])


def test_every_role_of_the_pipeline_and_its_stages_carries_the_permissions_boundary(
    synth: PipelineSynth,
) -> None:
    """The pipeline updates itself from the branch before any approval: the boundary that every
    account's bootstrap requires (cdk bootstrap --custom-permissions-boundary) is on every role."""
    boundary = synth.pipeline.settings.permissions_boundary
    templates = ["TrainiumPipeline"] + [
        f"assembly-{construct_id_of(environment.name)}/{construct_id_of(environment.name)}TrainiumStack"
        for _, environment, _ in synth.pipeline.stages()
    ]
    checked = 0
    for name in templates:
        path = synth.outdir / f"{name}.template.json"
        if not path.exists():  # the nested assembly names its template after the stack's artifact id
            [path] = (synth.outdir / name.split("/")[0]).glob("*TrainiumStack*.template.json")
        for logical_id, resource in json.loads(path.read_text())["Resources"].items():
            if resource["Type"] != "AWS::IAM::Role":
                continue
            checked += 1
            assert boundary in json.dumps(resource["Properties"].get("PermissionsBoundary")), (
                name,
                logical_id,
            )
    assert checked > 20


def test_every_build_of_the_pipeline_logs_to_the_group_under_its_logs_key(synth: PipelineSynth) -> None:
    """Synth, self-mutation, assets and the deployment checks: one log group, encrypted with the
    pipeline's own key (whose policy admits only CloudWatch Logs of this account and region)."""
    [(key_id, key)] = [
        (logical_id, resource)
        for logical_id, resource in synth.resources("AWS::KMS::Key").items()
        if logical_id.startswith("LogEncryption")
    ]
    groups = synth.resources("AWS::Logs::LogGroup")
    [(group_id, group)] = [(i, g) for i, g in groups.items() if i.startswith("BuildLogs")]
    for logical_id, other in groups.items():  # the auto-approve function's, the check VPC's flow logs
        assert other["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}, logical_id
    assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert group["DeletionPolicy"] == "Retain"
    projects = synth.resources("AWS::CodeBuild::Project")
    assert len(projects) >= 4
    for logical_id, project in projects.items():
        cloud_watch = project["Properties"]["LogsConfig"]["CloudWatchLogs"]
        assert (cloud_watch["Status"], cloud_watch["GroupName"]) == ("ENABLED", {"Ref": group_id}), logical_id
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    assert any("kms:EncryptionContext:aws:logs:arn" in json.dumps(s.get("Condition", {})) for s in statements)


def test_a_stage_with_the_canary_runs_it_from_the_checkout_with_the_rights_and_the_time(
    tmp_path: Path,
) -> None:
    """staging with canary: true in the pipeline file: its check step gets the checkout beside the
    synth output and runs the script whose step 7 is make canary with staging's environment file;
    its CodeBuild limit covers the canary's bounds; the stage's RBAC carries the canary's Roles and
    fences, applied after the namespaces they live in. Other stages are as they were."""
    import shutil  # noqa: PLC0415

    import yaml  # noqa: PLC0415

    from cluster_plan.canary_run import canary_manifests, canary_run  # noqa: PLC0415
    from cluster_plan.deployment_check import deployment_check_timeout_minutes  # noqa: PLC0415
    from k8s_charts.plan import PLATFORM_STEP, TEAMS_STEP  # noqa: PLC0415

    shutil.copytree(REPO_ROOT / "config" / "environments", tmp_path / "environments")
    data = yaml.safe_load((REPO_ROOT / PIPELINE_FILE).read_text())
    data["waves"][1]["environments"][0]["canary"] = True
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(data))
    pipeline = load_pipeline(tmp_path / "pipeline.yaml")
    outdir = tmp_path / "out"
    app = cdk.App(context=project_context(), outdir=str(outdir))
    stack = TrainiumPipeline(app, pipeline=pipeline, pipeline_file="config/pipeline.yaml")
    app.synth()
    checked = PipelineSynth(app=app, stack=stack, pipeline=pipeline, outdir=outdir)

    check = actions_of(checked, "staging", "staging")["DeploymentCheck"]
    synth_output = checked.stage("Build")[0]["OutputArtifacts"][0]["Name"]
    source_output = checked.stage("Source")[0]["OutputArtifacts"][0]["Name"]
    assert [artifact["Name"] for artifact in check["InputArtifacts"]] == [synth_output, source_output]
    project = checked.project(check)
    plain = {item["Name"]: item["Value"] for item in project["Environment"]["EnvironmentVariables"]}
    assert (plain["CANARY"], plain["CANARY_SOURCE"], plain["CANARY_CONFIG"]) == (
        "true",
        "source",
        "config/environments/staging.yaml",
    )
    spec = checked.build_spec(check)
    assert spec["phases"]["build"]["commands"] == [deployment_check_script()]
    assert 'make -C "${CANARY_SOURCE}" canary CONFIG="${CANARY_CONFIG}"' in deployment_check_script()
    # CDK Pipelines places the checkout at the folder the script reads it from.
    assert any("source" in command for command in spec["phases"]["install"]["commands"]), spec
    staging = pipeline.environments["staging"]
    assert (
        project["TimeoutInMinutes"]
        == deployment_check_timeout_minutes(staging, canary=True)
        == 30 + 15 + 45 + 2 + 10
    )
    dev = checked.project(actions_of(checked, "dev", "dev")["DeploymentCheck"])
    assert dev["TimeoutInMinutes"] == 30
    assert {item["Name"]: item["Value"] for item in dev["Environment"]["EnvironmentVariables"]}[
        "CANARY"
    ] == "false"

    # The stage's check may create exactly the canary's rendered objects, once their namespaces exist.
    run_id, _ = canary_manifests(canary_run(staging))
    [template_file] = (outdir / "assembly-Staging").glob("StagingTrainiumStack*.template.json")
    resources = json.loads(template_file.read_text())["Resources"]
    [rbac] = [
        resource
        for resource in resources.values()
        if "trainium-deployment-check-canary" in json.dumps(resource)
    ]
    text = json.dumps(rbac)
    for expected in (
        run_id,
        "trainium-deployment-check-volcano-jobs",
        "trainium-deployment-check-config-maps",
    ):
        assert expected in text, expected
    staging_stack = stack.stages["staging"].stack
    steps = {
        step: staging_stack.resolve(
            staging_stack.get_logical_id(
                next(
                    c
                    for c in staging_stack.kubernetes.applied[step].node.find_all()
                    if isinstance(c, cdk.CfnResource)
                )
            )
        )
        for step in (TEAMS_STEP, PLATFORM_STEP)
    }
    assert set(steps) == {TEAMS_STEP, PLATFORM_STEP}, steps
    assert set(steps.values()) <= set(rbac.get("DependsOn", [])), rbac.get("DependsOn")
    # Without the option the stage's check has no canary access.
    [dev_template] = (outdir / "assembly-Dev").glob("DevTrainiumStack*.template.json")
    assert "trainium-deployment-check-canary" not in dev_template.read_text()
