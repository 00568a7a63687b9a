#!/usr/bin/env bash
# The operator end to end in a local kind cluster:
#   1. a kind cluster whose node mounts a host directory for the Pulumi state
#   2. the operator image, built and loaded into kind
#   3. the passphrase and discovery-token Secrets (kept under the state dir,
#      reused on every run: the stacks need the same passphrase forever)
#   4. deploy/kind (the kustomize base + the hostPath volume), rolled out
#   5. the sample Proxies of examples/, waited for until Ready
#   6. a lease through the port-forwarded discovery Service
#   7. `pulumi stack ls --all` on the host, against the mounted backend
# Idempotent: run it again after a change to rebuild and roll out the image.
#
# Needs: docker, kind, kubectl (1.27+), curl and pulumi on PATH.
# Settings: EGRESS_PROXIES_KIND_CLUSTER (default egress-proxies),
#           EGRESS_PROXIES_KIND_STATE   (default <repo>/.state/kind),
#           EGRESS_PROXIES_KIND_PORT    (local discovery port, default 8090).
set -Eeuo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cluster=${EGRESS_PROXIES_KIND_CLUSTER:-egress-proxies}
state=${EGRESS_PROXIES_KIND_STATE:-$repo/.state/kind}
port=${EGRESS_PROXIES_KIND_PORT:-8090}
image=egress-proxies:kind
namespace=egress-proxies # also QUICKSTART_NAMESPACE in deploy/lib
demo=demo
current="starting"
FORWARDER=""
reported=false

step() {
  current=$*
  printf '\n==> %s\n' "$*"
}

fail() {
  printf '\nERROR: %s\n' "$*" >&2
  exit 1
}

on_error() {
  # With errtrace the trap fires in the failing function and again in its
  # callers; report once.
  [ "$reported" = true ] && return
  reported=true
  printf '\nERROR: quickstart failed while: %s (line %s)\n' "$current" "$1" >&2
}

cleanup() {
  if [ -n "$FORWARDER" ]; then
    kill "$FORWARDER" 2>/dev/null || true
  fi
}

trap 'on_error $LINENO' ERR
trap cleanup EXIT

KUBECTL_ARGS=(--context "kind-$cluster")
k() {
  kubectl "${KUBECTL_ARGS[@]}" "$@"
}

need() {
  command -v "$1" >/dev/null 2>&1 || fail "$1 is not installed (needed to $2)"
}

operator_logs() {
  echo "--- operator log (last 40 lines) ---" >&2
  k -n "$namespace" logs deployment/egress-proxies --tail=40 >&2 || true
}

# shellcheck source=deploy/lib/quickstart-steps.sh
source "$repo/deploy/lib/quickstart-steps.sh"

step "Checking the tools"
need docker "build the operator image"
need kind "run the cluster"
need kubectl "apply the manifests"
need curl "call the discovery API"
need pulumi "list the stacks on the host"
docker info >/dev/null 2>&1 || fail "docker is installed but its daemon does not answer (is it running?)"
echo "docker, kind, kubectl, curl and pulumi found"

step "Preparing the state dir $state"
mkdir -p "$state/pulumi-state" "$state/pulumi-home"
# The operator runs as uid 65532; the mounted directory must be writable by it.
chmod 0777 "$state/pulumi-state"
prepare_secrets "$state"
token=$(cat "$state/discovery-token")
echo "passphrase: $state/passphrase (keep it: the stacks cannot be decrypted without it)"
echo "discovery token: $state/discovery-token"

step "Creating the kind cluster '$cluster'"
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  echo "cluster '$cluster' exists; reusing it"
else
  sed "s|HOST_STATE_DIR|$state/pulumi-state|" "$repo/deploy/kind/cluster.yaml" >"$state/cluster.yaml"
  kind create cluster --name "$cluster" --config "$state/cluster.yaml" \
    || fail "kind could not create the cluster (see its output above)"
fi

step "Building the image $image"
DOCKER_BUILDKIT=1 docker build -f "$repo/deploy/Dockerfile" -t "$image" "$repo" \
  || fail "docker build failed (see its output above)"

step "Loading $image into kind"
kind load docker-image "$image" --name "$cluster" || fail "kind could not load the image"

step "Creating the namespace and the Secrets"
create_namespace_and_secrets "$repo" "$state" quickstart

step "Applying deploy/kind (the kustomize base on the mounted state dir)"
apply_and_roll_out "$repo/deploy/kind"

step "Creating the sample Proxies (examples/) and the External proxy's Squid"
k apply -f "$repo/deploy/kind/external-squid.yaml"
k -n "$demo" rollout status deployment/squid-external --timeout=300s \
  || fail "the Squid for the External proxy did not start"
k -n "$demo" apply -f "$repo/examples/managed-proxy.yaml"
sed "s/EXTERNAL_HOST/squid-external.$demo.svc.cluster.local/" "$repo/examples/external-proxy.yaml" \
  | k -n "$demo" apply -f -

step "Waiting for both Proxies to be Ready (the first pulumi up takes a minute)"
wait_proxies_ready "$demo" squid-eu-1 partner-1

step "Port-forwarding the discovery Service to 127.0.0.1:$port"
port_forward_discovery "$port" "$state/port-forward.log"

step "Leasing a proxy from the pool 'default' for 300 seconds"
lease_from_host "$port" "$token" '{"pool":"default"}' example.com

step "The stacks, as the pulumi CLI on the host sees them"
list_stacks "file://$state/pulumi-state/backend" "$state/passphrase" "$state/pulumi-home"

current="done"
cat <<MSG

Everything keeps running in the kind cluster '$cluster'. Try:
  kubectl --context kind-$cluster get proxies -A
  kubectl --context kind-$cluster -n $namespace port-forward service/egress-proxies $port:discovery $((port + 1000)):metrics
  PULUMI_BACKEND_URL=file://$state/pulumi-state/backend PULUMI_CONFIG_PASSPHRASE_FILE=$state/passphrase \\
    pulumi stack history -s $demo.squid-eu-1
Delete everything with: kind delete cluster --name $cluster  (the state stays in $state)
MSG
