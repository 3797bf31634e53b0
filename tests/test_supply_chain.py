"""Supply chain: images through the account's ECR pull-through cache, digests, hashed Python locks."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk.assertions import Template

from cluster_facts.image_sources import (
    DIRECT_PULLS,
    IMAGE_DIGESTS,
    PULL_THROUGH_PREFIX,
    TAG_ONLY_IMAGES,
    UPSTREAM_REGISTRIES,
    ImageSource,
    cache_rule_prefix,
    cached_repository_arn,
    digest_exception_reason,
    mirror_prefix,
    pull_through_image,
    pull_through_repository_arn,
    upstream_repository,
)
from cluster_facts.images import split_image
from cluster_facts.kubernetes_plan import HelmRelease, KubernetesLayerPlan, ManifestSet
from cluster_facts.versions import VOLCANO_IMAGE_NAMES
from cluster_plan.kubernetes_values import cached_repository_arns, review_plan
from config import ConfigError, load_config, parse_config
from config.model import StackConfig
from constructs_trn.pull_through_cache import PullThroughCache
from k8s_charts.addons.volcano_scheduler import volcano_images
from k8s_charts.shared.policy_exceptions import DIGEST_CHECK
from k8s_charts.teams.etcd import MEMBER_IMAGE as ETCD_MEMBER_IMAGE
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG, REPO_ROOT, Synthesized
from tests.k8s_charts.manifests import containers
from tests.plans import shared_review_plan
from tests.yaml_edits import with_change

ACCOUNT, REGION = "111122223333", "us-west-2"
REGISTRY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"


# --- the mapping --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("upstream", "cached"),
    [
        ("quay.io/coreos/etcd:v3.5.33", f"{REGISTRY}/upstream/quay.io/coreos/etcd:v3.5.33"),
        (
            "registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.5",
            f"{REGISTRY}/upstream/registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.5",
        ),
        (
            "public.ecr.aws/neuron/neuron-device-plugin:2.22.4.0@sha256:" + "a" * 64,
            f"{REGISTRY}/upstream/public.ecr.aws/neuron/neuron-device-plugin:2.22.4.0@sha256:" + "a" * 64,
        ),
        # Docker Hub's official images live under library/, which ECR needs spelled out.
        ("docker.io/alpine:3.24.1", f"{REGISTRY}/upstream/docker.io/library/alpine:3.24.1"),
        ("ghcr.io/org/tool:1.0", f"{REGISTRY}/upstream/ghcr.io/org/tool:1.0"),
    ],
)
def test_an_upstream_reference_maps_to_the_accounts_cache(upstream: str, cached: str) -> None:
    assert pull_through_image(upstream, account=ACCOUNT, region=REGION) == cached
    assert upstream_repository(cached) == upstream_repository(upstream)


def test_china_regions_use_their_own_registry_domain_and_partition() -> None:
    image = pull_through_image("quay.io/coreos/etcd:v3.5.33", account=ACCOUNT, region="cn-north-1")
    assert image.startswith(f"{ACCOUNT}.dkr.ecr.cn-north-1.amazonaws.com.cn/upstream/quay.io/")
    assert pull_through_repository_arn(account=ACCOUNT, region="cn-north-1") == (
        f"arn:aws-cn:ecr:cn-north-1:{ACCOUNT}:repository/upstream/*"
    )


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        ("nvcr.io/nvidia/pytorch:24.01-py3", "does not serve 'nvcr.io'"),
        ("quay.io/coreos/etcd", "is not a pinned image"),
        ("etcd:v3.5.33", "is not a pinned image"),
    ],
)
def test_the_mapping_refuses_what_the_cache_cannot_serve(image: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        pull_through_image(image, account=ACCOUNT, region=REGION)


def test_every_rule_prefix_fits_ecr_and_sits_under_the_one_prefix() -> None:
    # AWS::ECR::PullThroughCacheRule EcrRepositoryPrefix: 2-30 characters.
    for host in UPSTREAM_REGISTRIES:
        prefix = cache_rule_prefix(host)
        assert 2 <= len(prefix) <= 30, prefix
        assert prefix == f"{PULL_THROUGH_PREFIX}/{host}"


def test_an_image_source_caches_only_the_registries_it_has_rules_for() -> None:
    source = ImageSource(account=ACCOUNT, region=REGION, cached=frozenset({"quay.io"}))
    assert source.resolve("quay.io/coreos/etcd:v3.5.33").startswith(f"{REGISTRY}/upstream/quay.io/")
    assert (
        source.resolve("docker.io/volcanosh/vc-scheduler:v1.15.1")
        == "docker.io/volcanosh/vc-scheduler:v1.15.1"
    )
    assert source.registry("docker.io") == "docker.io"
    assert source.registry("quay.io") == f"{REGISTRY}/upstream/quay.io"
    assert ImageSource().resolve("quay.io/coreos/etcd:v3.5.33") == "quay.io/coreos/etcd:v3.5.33"


# --- every image the cluster pulls ----------------------------------------------------------------


def plan_images(plan: KubernetesLayerPlan) -> Iterator[tuple[str, str]]:
    """(step, image) for every container of every manifest set and every image of every Helm release."""
    for step in plan.steps:
        if isinstance(step, ManifestSet):
            for manifest in step.manifests:
                for container in containers(dict(manifest)):
                    yield step.name, container["image"]
        elif isinstance(step, HelmRelease):
            for image in step.images:
                yield step.name, image


def direct_pull_reason(image: str) -> str | None:
    host, path, _, _ = split_image(image)
    return next(
        (
            reason
            for prefix, reason in DIRECT_PULLS.items()
            if f"{host}/{path}".startswith(prefix) or path.startswith(prefix)
        ),
        None,
    )


@pytest.fixture(params=["default_stack", "example_stack"], ids=["default", "example"])
def stack(request: pytest.FixtureRequest) -> Synthesized:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def test_every_image_comes_through_the_accounts_registry_or_is_a_listed_exception(stack: Synthesized) -> None:
    account = f"{stack.config.account}.dkr.ecr.{stack.config.region}.amazonaws.com"
    # The cache, or the stack's copies (Docker Hub's images without a credential: image_mirror.py).
    registries = (f"{account}/{PULL_THROUGH_PREFIX}/", f"{account}/{mirror_prefix(stack.config.name)}/")
    images = list(plan_images(stack.stack.kubernetes_plan))
    assert len(images) >= 10
    elsewhere = [(step, image) for step, image in images if not image.startswith(registries)]
    assert {step for step, _ in elsewhere} == {"efa-device-plugin"}  # EKS's registry: DIRECT_PULLS
    copied = {image for _, image in images if image.startswith(registries[1])}
    assert {upstream_repository(image) for image in copied} == {
        f"docker.io/{name}" for name in VOLCANO_IMAGE_NAMES
    }
    for step, image in elsewhere:
        assert direct_pull_reason(image), f"{step}: {image} is neither cached nor in DIRECT_PULLS"


def test_the_helm_values_name_exactly_the_images_the_release_lists(stack: Synthesized) -> None:
    charts = {
        resource["Properties"]["Release"]: json.loads(resource["Properties"]["Values"])
        for resource in stack.resources("Custom::AWSCDK-EKS-HelmChart").values()
    }
    plan = stack.stack.kubernetes_plan
    autoscaler, volcano = plan.step("cluster-autoscaler"), plan.step("volcano")
    assert isinstance(autoscaler, HelmRelease) and isinstance(volcano, HelmRelease)
    image = charts["cluster-autoscaler"]["image"]
    assert (f"{image['repository']}:{image['tag']}",) == autoscaler.images
    assert volcano_images(charts["volcano"]) == volcano.images
    assert charts["volcano"]["basic"]["image_tag_version"] == "v1.15.1"


def test_every_image_is_digest_pinned_or_its_tag_only_pin_is_explained(stack: Synthesized) -> None:
    for step, image in plan_images(stack.stack.kubernetes_plan):
        if split_image(image)[3] is None:
            repository = upstream_repository(image)
            known = repository in TAG_ONLY_IMAGES or any(
                key.split("/", 1)[1] == repository.split("/", 1)[1] for key in TAG_ONLY_IMAGES
            )
            assert known, f"{step}: {image} has no digest and no entry in TAG_ONLY_IMAGES"


def test_every_recorded_digest_reaches_the_rendered_reference() -> None:
    source = ImageSource(account=ACCOUNT, region=REGION, cached=frozenset({"public.ecr.aws", "quay.io"}))
    for tagged, digest in IMAGE_DIGESTS.items():
        assert source.resolve(tagged).endswith(f"{tagged.rsplit('/', 1)[1]}@{digest}")


def test_a_published_digest_pins_the_rendered_image_and_drops_its_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    digest = "sha256:" + "e" * 64
    # etcd's StatefulSet runs two images: etcd and, in its init container, the platform's Python.
    monkeypatch.setattr(
        "cluster_facts.image_sources.IMAGE_DIGESTS",
        {"quay.io/coreos/etcd:v3.5.33": digest, ETCD_MEMBER_IMAGE: digest},
    )
    plan = review_plan(load_config(DEFAULT_CONFIG))
    etcd = plan.step("etcd")
    assert isinstance(etcd, ManifestSet)
    [statefulset] = [manifest for manifest in etcd.manifests if manifest["kind"] == "StatefulSet"]
    images = {container["name"]: container["image"] for container in containers(dict(statefulset))}
    assert images["etcd"].endswith(f"/upstream/quay.io/coreos/etcd:v3.5.33@{digest}")
    assert images["member"].endswith(f"@{digest}")
    assert DIGEST_CHECK not in json.dumps(statefulset["metadata"].get("annotations", {}))


def test_each_tag_pinned_workload_carries_its_own_digest_exception() -> None:
    plan = review_plan(load_config(EXAMPLE_CONFIG))
    for step in plan.manifest_sets():
        for manifest in step.manifests:
            images = [container["image"] for container in containers(dict(manifest))]
            if not images or manifest["apiVersion"] == "batch.volcano.sh/v1alpha1":
                continue  # checkov does not read Volcano Jobs
            annotations = manifest["metadata"].get("annotations", {})
            excused = [value for value in annotations.values() if value.startswith(f"{DIGEST_CHECK}=")]
            reasons = {digest_exception_reason(image) for image in images} - {None}
            assert bool(excused) == bool(reasons), (step.name, manifest["metadata"]["name"])
            for reason in reasons:
                assert reason and reason in excused[0]


def test_the_digest_check_is_no_longer_skipped_for_every_object() -> None:
    settings = yaml.safe_load((REPO_ROOT / ".checkov.yaml").read_text())
    assert DIGEST_CHECK not in settings.get("skip-check", [])


# --- the rules in the stack ------------------------------------------------------------------------


def test_the_stack_creates_a_rule_per_credential_free_registry(default_stack: Synthesized) -> None:
    rules = default_stack.resources("AWS::ECR::PullThroughCacheRule")
    found = {
        rule["Properties"]["EcrRepositoryPrefix"]: (
            rule["Properties"]["UpstreamRegistryUrl"],
            rule["Properties"]["UpstreamRegistry"],
        )
        for rule in rules.values()
    }
    assert found == {
        "upstream/public.ecr.aws": ("public.ecr.aws", "ecr-public"),
        "upstream/quay.io": ("quay.io", "quay"),
        "upstream/registry.k8s.io": ("registry.k8s.io", "k8s"),
    }
    assert not any("CredentialArn" in rule["Properties"] for rule in rules.values())
    _, template = default_stack.only("AWS::ECR::RepositoryCreationTemplate")
    assert template["Properties"]["Prefix"] == PULL_THROUGH_PREFIX
    assert template["Properties"]["AppliedFor"] == ["PULL_THROUGH_CACHE"]


def test_nothing_in_the_cluster_is_applied_before_the_rules_exist(default_stack: Synthesized) -> None:
    rules = set(default_stack.resources("AWS::ECR::PullThroughCacheRule"))
    applied = {
        **default_stack.resources("Custom::AWSCDK-EKS-KubernetesResource"),
        **default_stack.resources("Custom::AWSCDK-EKS-HelmChart"),
    }
    assert applied
    for logical_id, resource in applied.items():
        if logical_id.startswith("DeploymentCheck"):
            continue
        assert rules <= set(resource.get("DependsOn", [])), logical_id


def cache_template(credentials: dict[str, str]) -> Template:
    stack = cdk.Stack(cdk.App(), "Cache", env=cdk.Environment(account=ACCOUNT, region=REGION))
    PullThroughCache(
        stack,
        "Cache",
        account=ACCOUNT,
        region=REGION,
        registries=[*sorted(credentials), "quay.io"],
        credentials=credentials,
        keep_images=30,
    )
    return Template.from_stack(stack)


def test_docker_hub_gets_a_rule_only_with_its_credential() -> None:
    secret = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:ecr-pullthroughcache/dockerhub-AbCdEf"
    template = cache_template({"docker.io": secret})
    template.has_resource_properties(
        "AWS::ECR::PullThroughCacheRule",
        {
            "EcrRepositoryPrefix": "upstream/docker.io",
            "UpstreamRegistryUrl": "registry-1.docker.io",
            "UpstreamRegistry": "docker-hub",
            "CredentialArn": secret,
        },
    )
    with pytest.raises(ValueError, match="only with a credential"):
        PullThroughCache(
            cdk.Stack(cdk.App(), "S"),
            "Cache",
            account=ACCOUNT,
            region=REGION,
            registries=["docker.io"],
            credentials={},
            keep_images=30,
        )


def test_both_node_roles_may_pull_and_import_through_the_cache_only(default_stack: Synthesized) -> None:
    """Pull from any cached repository; import (a first pull) only into those of the images the stack
    names, never an upstream repository of the node's choosing."""
    arn = f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/upstream/*"
    assert (default_stack.config.account, default_stack.config.region) == (ACCOUNT, REGION)
    pulls, imports = {}, {}
    for policy in default_stack.resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            role = json.dumps(policy["Properties"]["Roles"])
            resources = (
                statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            )
            if arn in resources:
                pulls[role] = set(statement["Action"])
            if "ecr:BatchImportUpstreamImage" in statement["Action"]:
                imports[role] = (set(statement["Action"]), statement["Resource"])
    assert len(pulls) == len(imports) == 2  # the system nodes' role and the Trainium nodes' role
    named = cached_repository_arns(default_stack.config, default_stack.stack.review_plan)
    for actions in pulls.values():
        assert actions == {"ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"}
    for actions, resources in imports.values():
        assert actions == {"ecr:BatchImportUpstreamImage", "ecr:CreateRepository"}
        assert resources == named
    prefix = f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/upstream/"
    assert all(r.startswith(prefix) and "*" not in r for r in named)
    # The images the stack runs and the TorchX component's default, each once.
    assert f"{prefix}public.ecr.aws/neuron/pytorch-training-neuronx" in named
    assert f"{prefix}quay.io/coreos/etcd" in named
    assert f"{prefix}public.ecr.aws/neuron/neuron-device-plugin" in named


def test_every_image_of_the_plan_through_the_cache_may_be_imported(default_stack: Synthesized) -> None:
    named = set(cached_repository_arns(default_stack.config, default_stack.stack.review_plan))
    for _, image in plan_images(default_stack.stack.kubernetes_plan):
        arn = cached_repository_arn(image, account=ACCOUNT, region=REGION)
        assert arn is None or arn in named, image


def test_cached_repositories_keep_their_tags(default_stack: Synthesized) -> None:
    [template] = default_stack.resources("AWS::ECR::RepositoryCreationTemplate").values()
    assert template["Properties"]["ImageTagMutability"] == "IMMUTABLE"
    assert template["Properties"]["AppliedFor"] == ["PULL_THROUGH_CACHE"]


def test_pinned_images_are_pulled_once_per_node() -> None:
    """IfNotPresent for every pinned image the charts run (immutable cache tags make the first
    pull the only one), each object saying so to checkov."""
    plan = shared_review_plan(load_config(DEFAULT_CONFIG))
    seen = 0
    for step in plan.manifest_sets():
        for manifest in step.manifests:
            for container in containers(dict(manifest)):
                if "imagePullPolicy" in container:
                    seen += 1
                    assert container["imagePullPolicy"] == "IfNotPresent", (step.name, container["name"])
                    annotations = manifest["metadata"].get("annotations", {})
                    assert any(value.startswith("CKV_K8S_15=") for value in annotations.values()), step.name
    assert seen >= 7


# --- configuration ----------------------------------------------------------------------------------


def config_with(*changes: tuple[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG.read_text())
    for path, value in changes:
        data = with_change(data, path, value)
    return data


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(data, source="env.yaml")
    return raised.value.lines()


def parsed(data: dict[str, Any]) -> StackConfig:
    return parse_config(data, source="env.yaml")


SECRET = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:ecr-pullthroughcache/dockerhub-AbCdEf"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            [("runs.0.image", "docker.io/library/python:3.12")],
            (
                "env.yaml: runs[0].image: 'docker.io/library/python:3.12' is on docker.io, which ECR's pull-through "
                "cache serves only with a credential: set ecr.upstream_credentials.docker.io"
            ),
        ),
        (
            [("runs.0.image", "nvcr.io/nvidia/pytorch:24.01-py3")],
            (
                "env.yaml: runs[0].image: 'nvcr.io/nvidia/pytorch:24.01-py3' is on nvcr.io, which ECR's pull-through "
                "cache does not serve; allowed: public.ecr.aws, quay.io, registry.k8s.io or an ECR repository of "
                "this account"
            ),
        ),
        (
            [("runs.0.image", "444455556666.dkr.ecr.us-west-2.amazonaws.com/team/train:1")],
            (
                "env.yaml: runs[0].image: '444455556666.dkr.ecr.us-west-2.amazonaws.com/team/train:1' is in account "
                f"444455556666's ECR: nodes of account {ACCOUNT} pull it only when that repository's policy allows "
                f"account {ACCOUNT} ecr:BatchGetImage and ecr:GetDownloadUrlForLayer; once it does, add "
                "arn:aws:ecr:us-west-2:444455556666:repository/team/train to ecr.cross_account_repositories (the "
                "Trainium node role then gets pull on it), or push the image to this stack's repository"
            ),
        ),
        (
            # With the cache off too: turning the cache off never made another account's image pullable.
            [
                ("runs.0.image", "444455556666.dkr.ecr.us-west-2.amazonaws.com/team/train:1"),
                ("ecr.pull_through_cache", False),
            ],
            (
                "env.yaml: runs[0].image: '444455556666.dkr.ecr.us-west-2.amazonaws.com/team/train:1' is in "
                "account 444455556666's ECR"
            ),
        ),
        (
            [("ecr.cross_account_repositories", [f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/team/train"])],
            (
                f"env.yaml: ecr.cross_account_repositories[0]: arn:aws:ecr:{REGION}:{ACCOUNT}:repository/team/train "
                f"is a repository of this account ({ACCOUNT}): a run's image there needs no entry; remove it"
            ),
        ),
        (
            [
                (
                    "ecr.upstream_credentials",
                    {"docker.io": "arn:aws:secretsmanager:us-west-2:111122223333:secret:hub"},
                )
            ],
            (
                "env.yaml: ecr.upstream_credentials.docker.io: 'arn:aws:secretsmanager:us-west-2:111122223333:secret:hub' "
                "is not a Secrets Manager secret ARN whose name starts with ecr-pullthroughcache/"
            ),
        ),
        (
            [("ecr.upstream_credentials", {"docker.io": SECRET.replace(ACCOUNT, "444455556666")})],
            (
                "env.yaml: ecr.upstream_credentials.docker.io: the secret is in account 444455556666, us-west-2; ECR "
                "reads it only in the registry's account and region (111122223333, us-west-2)"
            ),
        ),
        (
            [("ecr.upstream_credentials", {"quay.io": SECRET})],
            "env.yaml: ecr.upstream_credentials: key 'quay.io': Input should be 'docker.io' or 'ghcr.io'",
        ),
    ],
    ids=[
        "docker-hub-without-credential",
        "unserved-registry",
        "other-accounts-ecr",
        "other-accounts-ecr-cache-off",
        "own-account-declared",
        "bad-secret",
        "secret-elsewhere",
        "quay",
    ],
)
def test_images_the_cache_cannot_serve_are_refused_in_one_line(
    changes: list[tuple[str, Any]], expected: str
) -> None:
    data = config_with(("runs", [{"name": "llm", "script": "train.py", "nodes": 1}]), *changes)
    [line] = problems_of(data)
    assert line.startswith(expected), line


def test_a_run_image_from_the_accounts_own_registry_or_docker_hub_with_a_credential_is_allowed() -> None:
    own = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/demo/training:bert-1"
    config = parsed(config_with(("runs", [{"name": "llm", "script": "train.py", "nodes": 1, "image": own}])))
    assert review_plan(config).step("run-llm")
    hub = config_with(
        (
            "runs",
            [{"name": "llm", "script": "train.py", "nodes": 1, "image": "docker.io/library/python:3.12"}],
        ),
        ("ecr.upstream_credentials", {"docker.io": SECRET}),
    )
    plan = review_plan(parsed(hub))
    step = plan.step("run-llm")
    assert isinstance(step, ManifestSet)
    images = {container["image"] for manifest in step.manifests for container in containers(dict(manifest))}
    assert images == {f"{REGISTRY}/upstream/docker.io/library/python:3.12"}
    # With Docker Hub cached, Volcano's images come through the cache too.
    volcano = plan.step("volcano")
    assert isinstance(volcano, HelmRelease)
    assert all(image.startswith(f"{REGISTRY}/upstream/docker.io/volcanosh/") for image in volcano.images)


def test_with_the_cache_off_every_image_comes_from_upstream() -> None:
    config = parsed(
        config_with(
            ("ecr.pull_through_cache", False),
            (
                "runs",
                [
                    {
                        "name": "llm",
                        "script": "train.py",
                        "nodes": 1,
                        "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                    }
                ],
            ),
        )
    )
    assert config.ecr.cached_registries == frozenset()
    assert not any(
        ".dkr.ecr." in image and "/upstream/" in image for _, image in plan_images(review_plan(config))
    )


# --- Python locks -------------------------------------------------------------------------------------

LOCKS = {
    "requirements.txt": "requirements.lock",
    "requirements-dev.txt": "requirements-dev.lock",
    "requirements-checkov.txt": "requirements-checkov.lock",
    "requirements-torch.txt": "requirements-torch.lock",
    "requirements-torchx.txt": "requirements-torchx.lock",
    "requirements-tensorboard.txt": "requirements-tensorboard.lock",
}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` line (``-r`` includes followed)."""
    found: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("-r "):
            found.update(pins(path.parent / line.removeprefix("-r ").strip()))
        elif match := re.match(r"([A-Za-z0-9_.\-]+)==([^\s;\\]+)", line):
            found[normalized(match[1])] = match[2]
    return found


def locked(path: Path) -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) of a lock file."""
    entries: dict[str, tuple[str, int]] = {}
    current = None
    for line in path.read_text().splitlines():
        if match := re.match(r"([A-Za-z0-9_.\-]+)==(\S+)", line):
            current = normalized(match[1])
            entries[current] = (match[2], 0)
        elif current and (hashed := re.search(r"--hash=sha256:[0-9a-f]{64}", line)):
            version, count = entries[current]
            entries[current] = (version, count + 1 if hashed else count)
    return entries


@pytest.mark.parametrize("requirements", sorted(LOCKS))
def test_every_pin_is_locked_at_its_version_with_hashes(requirements: str) -> None:
    lock = locked(REPO_ROOT / LOCKS[requirements])
    for name, version in pins(REPO_ROOT / requirements).items():
        assert name in lock, (
            f"{name} is pinned in {requirements} but not in {LOCKS[requirements]}: run make lock"
        )
        assert lock[name][0] == version, (
            f"{name}: {version} in {requirements}, {lock[name][0]} locked: run make lock"
        )
    assert all(count >= 1 for _, count in lock.values())


def test_every_constraint_holds_in_the_dev_lock() -> None:
    constraints = pins(REPO_ROOT / "constraints.txt")
    for name, (version, _) in locked(REPO_ROOT / "requirements-dev.lock").items():
        assert constraints.get(name, version) == version, f"{name}: constraints.txt and the lock disagree"


def test_make_installs_python_packages_only_from_hashed_locks() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "pip install" in line or "$(PIP_LOCKED)" in line]
    assert installs
    assert "PIP_LOCKED := python -m pip install --quiet --require-hashes" in makefile
    for line in installs:
        if line.startswith("PIP_LOCKED"):
            continue
        assert "$(PIP_LOCKED)" in line and re.search(r"-r requirements[-a-z]*\.lock", line), line
    assert re.search(r"^lock: .*## ", makefile, re.MULTILINE)
