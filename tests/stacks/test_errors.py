"""Classification of real provider errors as they surface through a failed pulumi operation.

Every error message below is copied from a public report (cited above it);
`pulumi_failure` wraps it the way the CLI prints a failed resource, and the
result is the text of the Automation API's CommandError, which is what the
stack runner hands to `classify`.
"""

from __future__ import annotations

import pytest
from pulumi.automation import CommandError, CommandResult

from egress_proxies.stacks.errors import ErrorClass, classify, summarize_error
from egress_proxies.stacks.programs.errors import PermanentProgramError

pytestmark = pytest.mark.unit


def pulumi_failure(resource: str, message: str) -> str:
    """The CommandError text of a `pulumi up` whose resource failed with `message`.

    The diagnostics layout of a bridged (Terraform-based) provider is the one in
    https://github.com/pulumi/pulumi-gcp/issues/2541: the message once on the
    `sdk-v2/provider2.go` line with the provider version, once in the
    "1 error occurred" list.
    """
    first_line = message.splitlines()[0] if message else ""
    stdout = f"""Updating (ns.proxy-a):
     Type                    Name                    Status                  Info
     pulumi:pulumi:Stack     egress-proxies-ns.proxy-a  **failed**          1 error
 +   └─ {resource:<22} proxy-3j5v7kdjq2z3nbxq  **creating failed**     1 error

Diagnostics:
  {resource} (proxy-3j5v7kdjq2z3nbxq):
    error:   sdk-v2/provider2.go:520: sdk.helper_schema: {message}: provider=google-beta@8.6.0
    error: 1 error occurred:
    \t* {first_line}

  pulumi:pulumi:Stack (egress-proxies-ns.proxy-a):
    error: update failed

Resources:
    1 unchanged
    1 errored
"""
    return str(CommandError(CommandResult(stdout=stdout, stderr="", code=255)))


def kubernetes_failure(message: str) -> str:
    """The CommandError text of a `pulumi up` whose pod the API server refused.

    Layout as in https://github.com/pulumi/pulumi-kubernetes/issues/735.
    """
    pod = "ns/proxy-3j5v7kdjq2z3nbxq"
    stdout = f"""Diagnostics:
  kubernetes:core/v1:Pod ({pod}):
    error: resource {pod} was not successfully created by the Kubernetes API server : {message}

  pulumi:pulumi:Stack (egress-proxies-ns.proxy-a):
    error: update failed
"""
    return str(CommandError(CommandResult(stdout=stdout, stderr="", code=255)))


GCP_QUOTA = [
    # https://github.com/mesosphere-backup/terraform-dcos/issues/61 (an Operation error:
    # the Terraform provider prefixes it with "Error waiting for instance to create").
    "Error waiting for instance to create: Quota 'CPUS' exceeded.  Limit: 8.0 in region us-east1.",
    # https://github.com/kelseyhightower/kubernetes-the-hard-way/issues/47
    "googleapi: Error 403: Quota 'IN_USE_ADDRESSES' exceeded. Limit: 4.0 in region us-central1.,"
    " quotaExceeded",
    # https://github.com/google/go-cloud/issues/244: reason "forbidden", but a quota.
    "googleapi: Error 403: \n\t(1) Insufficient regional quota to satisfy request for resource:"
    " \"IN_USE_ADDRESSES\". The request requires '9.0' and is short '1.0'. The regional quota"
    " is '8.0' with '8.0' available.\n\t(2) Insufficient regional quota to satisfy request for"
    " resource: \"CPUS\". The request requires '9.0' and is short '1.0'. The regional quota is"
    " '8.0' with '8.0' available., forbidden",
    # https://github.com/kubeflow/examples/issues/597: status PERMISSION_DENIED, but a quota.
    '{"code":403,"message":"Insufficient project quota to satisfy request: resource'
    " \\\"CPUS_ALL_REGIONS\\\": request requires '16.0' and is short '4.0'. project has a quota"
    ' of \'12.0\' with \'12.0\' available.","status":"PERMISSION_DENIED"}',
    # https://github.com/terraform-google-modules/terraform-docs-samples/issues/610 (a 429
    # that is an allocation quota, not a rate limit).
    "Error creating Instance: googleapi: Error 429: Quota limit"
    " 'StandardInstancesPerProjectPerRegion' has been exceeded. Limit: 0 in region us-central1.",
    # https://github.com/PolicyEngine/policyengine-api/issues/177
    "INVALID_ARGUMENT: The following quotas were exceeded: CPUS (quota: 24, used: 24 + needed:"
    " 4), IN_USE_ADDRESSES (quota: 8, used: 8 + needed: 1).",
]

GCP_TRANSIENT = [
    # https://github.com/hashicorp/terraform-provider-google/issues/8360 (a rate limit
    # phrased as a quota).
    'Error when reading or editing ComputeBackendService "something3": googleapi: Error 403:'
    " Quota exceeded for quota group 'ReadGroup' and limit 'Read requests per user per 100"
    " seconds' of service 'compute.googleapis.com' for consumer 'project_number:123456'.,"
    " rateLimitExceeded",
    # https://github.com/GoogleCloudPlatform/python-docs-samples/issues/3482
    "429 Quota exceeded for quota metric 'Write requests' and limit 'Write requests per minute'"
    " of service 'cloudkms.googleapis.com' for consumer 'project_number:1012616486416'.",
    # Zone stockout: https://github.com/kestra-io/plugin-gcp/issues/698
    "Error waiting for instance to create: The zone 'projects/airbnb-prices-eu/zones/"
    "europe-west4-b' does not have enough resources available to fulfill the request.  Try a"
    " different zone, or try again later.",
    # https://github.com/mesosphere-backup/terraform-dcos/issues/23: a leftover of an
    # interrupted create; the stack runner resolves it by refresh or import.
    "Error creating firewall: googleapi: Error 409: The resource 'projects/massive-bliss-781/"
    "global/firewalls/internal-any-any-access' already exists, alreadyExists",
    # https://github.com/GoogleCloudPlatform/gke-migration-to-containers/issues/63: a 400
    # that passes (the subnetwork is still being created).
    "Error creating instance: googleapi: Error 400: The resource 'projects/qwiklabs-gcp-03-"
    "3671a6f1fb04/regions/us-central1/subnetworks/default' is not ready, resourceNotReady",
    # https://github.com/ZcashFoundation/zebra/issues/6451
    "Error waiting for instance to create: Internal error. Please try again or contact Google"
    " Support. (Code: '5F864782189D7.6B5868C.50A111B')",
]

GCP_PERMANENT = [
    # https://github.com/hashicorp/terraform/issues/15952
    "Error loading zone 'us-central1-b': googleapi: Error 403: Required 'compute.zones.get'"
    " permission for 'projects/my-project/zones/us-central1-b', forbidden",
    # https://github.com/GoogleCloudPlatform/cloud-foundation-toolkit/pull/97
    "Error loading machine type: googleapi: Error 403: Required 'compute.machineTypes.get'"
    " permission for 'projects/ci-forseti-host-6f38/zones/us-central1-f/machineTypes/f1-micro',"
    " forbidden",
    # https://github.com/mondoohq/mql/pull/3714 (the Compute API switched off)
    "googleapi: Error 403: Compute Engine API has not been used in project example-test before"
    " or it is disabled. Enable it by visiting https://console.developers.google.com/apis/api/"
    "compute.googleapis.com/overview?project=example-test then retry.",
    # https://github.com/pulumi/pulumi-gcp/issues/2896 ("quota project" is no quota)
    'Error when reading or editing ApikeysKey "projects/855590905560/locations/global/keys/'
    'test2": googleapi: Error 403: Your application is authenticating by using local'
    " Application Default Credentials. The apikeys.googleapis.com API requires a quota project,"
    ' which is not set by default.\nDetails:\n[\n  {\n    "reason": "SERVICE_DISABLED"\n  }\n]',
    # https://github.com/gruntwork-io/terratest/issues/1132
    "Error launching new Compute Instance: googleapi: Error 400: Invalid value for field"
    " 'resource.machineType': 'zones/europe-west8-a/machineTypes/f1-micro'. Machine type with"
    " name 'f1-micro' does not exist in zone 'europe-west8-a'., invalid",
    # https://github.com/hashicorp/terraform-provider-google/issues/10278
    "error retrieving image information: googleapi: Error 404: The resource"
    " 'projects/cis-public/global/images/family/cis-windows-server-2019-level-1' was not"
    " found, notFound",
    # The Terraform provider's own image lookup: ResolveImage in its compute image.go
    # returns "Could not find image or family %s", which the instance create wraps as
    # "Error resolving image name '%s'" (text from a public deployment log of a retired
    # Ubuntu family).
    "Error resolving image name 'ubuntu-os-cloud/ubuntu-2404-lts': Could not find image or"
    " family ubuntu-os-cloud/ubuntu-2404-lts",
    # https://github.com/pulumi/pulumi-gcp/issues/2541
    "Error creating EdgeCacheOrigin: googleapi: Error 404: Method not found.",
    # The Terraform provider's refusal to stop a running VM for an update (its compute
    # instance resource; text from a public lab transcript).
    "Changing the machine_type, min_cpu_platform, service_account, enable_display,"
    " shielded_instance_config, scheduling.node_affinities or network_interface.[#d].(network/"
    "subnetwork/subnetwork_project) or advanced_machine_features on a started instance requires"
    " stopping it. To acknowledge this, please set allow_stopping_for_update = true in your"
    " config.",
    # https://github.com/trailofbits/algo/issues/14854
    "GCP returned error: {'error': {'code': 400, 'message': 'Invalid resource field value in"
    " the request.', 'errors': [{'message': 'Invalid resource field value in the request.',"
    " 'domain': 'global', 'reason': 'invalidParameter'}], 'status': 'INVALID_ARGUMENT'}}",
]

KUBERNETES_PERMANENT = [
    # https://github.com/pulumi/pulumi-kubernetes/issues/2749 (RBAC denial, 403)
    'serviceaccounts is forbidden: User "deployer-sa@MYPROJECTNUMBER.iam.gserviceaccount.com"'
    ' cannot create resource "serviceaccounts" in API group "" in the namespace "my-namespace":'
    ' requires one of ["container.serviceAccounts.create"] permission(s).',
    # https://github.com/kubeflow/pipelines/issues/7699: a ResourceQuota that wants
    # requests set; retrying the same pod spec cannot help.
    'pods "example-pipeline-vlklw-3223166133" is forbidden: failed quota: kf-resource-quota:'
    " must specify cpu,memory",
    # https://github.com/pulumi/pulumi-kubernetes/issues/735 (422)
    'PersistentVolume "data-qa0agmpy" is invalid: spec: Required value: must specify a volume type',
    # https://github.com/pulumi/pulumi-kubernetes/issues/157 (422)
    'Service "frontendService" is invalid: metadata.name: Invalid value: "frontendService": a'
    " DNS-1035 label must consist of lower case alphanumeric characters or '-'",
    # https://github.com/Azure/Bridge-To-Kubernetes/issues/192
    "Unprocessable Entity: Pod ... is invalid: spec.ephemeralContainers: Forbidden: cannot be"
    " set on create",
]


@pytest.mark.parametrize("message", GCP_QUOTA)
def test_gcp_allocation_quotas_wait_for_quota(message: str) -> None:
    assert classify(pulumi_failure("gcp:compute:Instance", message)) is ErrorClass.QUOTA


@pytest.mark.parametrize("message", GCP_TRANSIENT)
def test_gcp_rate_limits_stockouts_and_leftovers_are_transient(message: str) -> None:
    assert classify(pulumi_failure("gcp:compute:Instance", message)) is ErrorClass.TRANSIENT


@pytest.mark.parametrize("message", GCP_PERMANENT)
def test_gcp_permission_and_invalid_argument_errors_are_permanent(message: str) -> None:
    assert classify(pulumi_failure("gcp:compute:Instance", message)) is ErrorClass.PERMANENT


@pytest.mark.parametrize("message", KUBERNETES_PERMANENT)
def test_kubernetes_forbidden_and_invalid_are_permanent(message: str) -> None:
    assert classify(kubernetes_failure(message)) is ErrorClass.PERMANENT


def test_kubernetes_resource_quota_waits_for_quota() -> None:
    # https://github.com/ministryofjustice/cloud-platform/issues/590: also a 403 "is forbidden".
    message = (
        'pods "allocation-manager-6597bc46dc-2wm8j" is forbidden: exceeded quota:'
        " namespace-quota, requested: limits.cpu=1,limits.memory=2Gi, used:"
        " limits.cpu=6,limits.memory=12Gi, limited: limits.cpu=6,limits.memory=12Gi"
    )
    assert classify(kubernetes_failure(message)) is ErrorClass.QUOTA


def test_kubernetes_missing_default_service_account_is_transient() -> None:
    # https://github.com/pdtpartners/nix-snapshotter/issues/154: the controller creates it soon.
    message = (
        'pods "redis" is forbidden: error looking up service account default/default:'
        ' serviceaccount "default" not found'
    )
    assert classify(kubernetes_failure(message)) is ErrorClass.TRANSIENT


@pytest.mark.parametrize(
    "message",
    [
        # https://github.com/pulumi/pulumi-kubernetes/issues/1544
        "configured Kubernetes cluster is unreachable: unable to load schema information from"
        ' the API server: Get "https://1.2.3.4/openapi/v2?timeout=32s": dial tcp 1.2.3.4:443:'
        " connect: connection refused",
        # https://github.com/pulumi/pulumi-kubernetes/issues/1216
        "configured Kubernetes cluster is unreachable: unable to load schema information from"
        " the API server: unexpected error when reading response body. Please retry. Original"
        " error: net/http: request canceled (Client.Timeout or context cancellation while"
        " reading body)",
    ],
)
def test_unreachable_cluster_is_transient(message: str) -> None:
    assert classify(kubernetes_failure(message)) is ErrorClass.TRANSIENT


def test_permanent_program_error_is_permanent() -> None:
    # The Automation API reports a pulumi.RunError from an inline program as its message
    # alone (pulumi/automation/_server.py), which the engine prints as a stack diagnostic.
    error = PermanentProgramError("spec.gcp.zone", "is required")
    stdout = f"""Diagnostics:
  pulumi:pulumi:Stack (egress-proxies-ns.proxy-a):
    error: {error}
"""
    text = str(CommandError(CommandResult(stdout=stdout, stderr="", code=255)))
    assert classify(text) is ErrorClass.PERMANENT
    assert error.field == "spec.gcp.zone"
    assert str(error) == "egress-proxies: invalid spec: spec.gcp.zone: is required"


@pytest.mark.parametrize(
    "stderr",
    [
        # The diy backend's lock conflict (pulumi/automation/errors.py matches this text).
        "error: the stack is currently locked by 1 lock(s). Either wait for the other"
        " process(es) to end or delete the lock file with `pulumi cancel`.",
        # A bug in a program is retried with backoff, visibly, rather than latched Failed.
        "error: python inline source runtime error: 'NoneType' object is not subscriptable",
        "",
    ],
)
def test_anything_unrecognised_is_transient(stderr: str) -> None:
    text = str(CommandError(CommandResult(stdout="", stderr=stderr, code=255)))
    assert classify(text) is ErrorClass.TRANSIENT


def test_a_retryable_error_wins_over_a_permanent_one_in_the_same_run() -> None:
    rate_limited = pulumi_failure("gcp:compute:Instance", GCP_TRANSIENT[0])
    forbidden = pulumi_failure("gcp:compute:Firewall", GCP_PERMANENT[0])
    assert classify(rate_limited + forbidden) is ErrorClass.TRANSIENT
    assert classify(pulumi_failure("gcp:compute:Instance", GCP_QUOTA[0]) + forbidden) is (
        ErrorClass.QUOTA
    )


def test_a_failure_summary_names_the_cause_not_pulumis_trailer() -> None:
    text = (
        "Updating (crawl.p1):\n"
        '  kubernetes:core/v1:Pod squid creating (0s) error: pods "proxy-x" is forbidden: '
        'User "system:serviceaccount:ns:op" cannot patch resource "pods"\n'
        "Resources:\n    2 errored\n\nDuration: 1s\n stderr:\n"
    )
    assert "is forbidden" in summarize_error(text)
    assert summarize_error("") == "unknown error"
