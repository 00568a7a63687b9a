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
namespace=egress-proxies
demo=demo
current="starting"
forwarder=""
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
  if [ -n "$forwarder" ]; then
    kill "$forwarder" 2>/dev/null || true
  fi
}

trap 'on_error $LINENO' ERR
trap cleanup EXIT

k() {
  kubectl --context "kind-$cluster" "$@"
}

need() {
  command -v "$1" >/dev/null 2>&1 || fail "$1 is not installed (needed to $2)"
}

operator_logs() {
  echo "--- operator log (last 40 lines) ---" >&2
  k -n "$namespace" logs deployment/egress-proxies --tail=40 >&2 || true
}

random_secret() {
  head -c 32 /dev/urandom | base64 | tr -d '/+=\n'
}

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
(
  umask 077
  [ -s "$state/passphrase" ] || random_secret >"$state/passphrase"
  [ -s "$state/discovery-token" ] || random_secret >"$state/discovery-token"
)
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
k apply -f "$repo/deploy/base/namespace.yaml"
k -n "$namespace" create secret generic stack-passphrase \
  --from-file=passphrase="$state/passphrase" --dry-run=client -o yaml | k apply -f -
k -n "$namespace" create secret generic discovery-tokens \
  --from-file=quickstart="$state/discovery-token" --dry-run=client -o yaml | k apply -f -

step "Applying deploy/kind (the kustomize base on the mounted state dir)"
existed=false
if k -n "$namespace" get deployment egress-proxies >/dev/null 2>&1; then
  existed=true
fi
k apply -k "$repo/deploy/kind" || fail "kubectl apply -k deploy/kind failed"
k wait --for=condition=Established crd/proxies.crawl.example.com --timeout=60s
if [ "$existed" = true ]; then
  # Same tag, new image: only a restart picks it up.
  k -n "$namespace" rollout restart deployment/egress-proxies
fi

step "Waiting for the operator to be ready"
if ! k -n "$namespace" rollout status deployment/egress-proxies --timeout=300s; then
  operator_logs
  fail "the operator did not become ready"
fi

step "Creating the sample Proxies (examples/) and the External proxy's Squid"
k apply -f "$repo/deploy/kind/external-squid.yaml"
k -n "$demo" rollout status deployment/squid-external --timeout=300s \
  || fail "the Squid for the External proxy did not start"
k -n "$demo" apply -f "$repo/examples/managed-proxy.yaml"
sed "s/EXTERNAL_HOST/squid-external.$demo.svc.cluster.local/" "$repo/examples/external-proxy.yaml" \
  | k -n "$demo" apply -f -

step "Waiting for both Proxies to be Ready (the first pulumi up takes a minute)"
for proxy in squid-eu-1 partner-1; do
  if ! k -n "$demo" wait --for=jsonpath='{.status.phase}'=Ready "proxy/$proxy" --timeout=300s; then
    k -n "$demo" describe proxy "$proxy" >&2 || true
    operator_logs
    fail "proxy $proxy did not become Ready"
  fi
done
k -n "$demo" get proxies -o wide

step "Port-forwarding the discovery Service to 127.0.0.1:$port"
# kubectl itself in the background (not through k), so $! is its pid.
kubectl --context "kind-$cluster" -n "$namespace" port-forward service/egress-proxies \
  "$port:discovery" >"$state/port-forward.log" 2>&1 &
forwarder=$!
for _ in $(seq 1 50); do
  if curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
    break
  fi
  kill -0 "$forwarder" 2>/dev/null || fail "kubectl port-forward exited: $(cat "$state/port-forward.log")"
  sleep 0.2
done
curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null || fail "the discovery API does not answer on 127.0.0.1:$port"
echo "discovery API on http://127.0.0.1:$port"

step "Leasing a proxy from the pool 'default' for 300 seconds"
curl -fsS -X POST "http://127.0.0.1:$port/v1/leases" \
  -H "Authorization: Bearer $token" \
  -H "Content-Type: application/json" \
  -d '{"selector":{"pool":"default"},"ttlSeconds":300,"target":"example.com"}' \
  || fail "the lease request failed"
echo

step "The stacks, as the pulumi CLI on the host sees them"
PULUMI_BACKEND_URL="file://$state/pulumi-state/backend" PULUMI_HOME="$state/pulumi-home" \
  PULUMI_CONFIG_PASSPHRASE_FILE="$state/passphrase" PULUMI_SKIP_UPDATE_CHECK=true \
  pulumi stack ls --all || fail "pulumi could not read the backend in $state/pulumi-state"

current="done"
cat <<MSG

Everything keeps running in the kind cluster '$cluster'. Try:
  kubectl --context kind-$cluster get proxies -A
  kubectl --context kind-$cluster -n $namespace port-forward service/egress-proxies $port:discovery $((port + 1000)):metrics
  PULUMI_BACKEND_URL=file://$state/pulumi-state/backend PULUMI_CONFIG_PASSPHRASE_FILE=$state/passphrase \\
    pulumi stack history -s $demo.squid-eu-1
Delete everything with: kind delete cluster --name $cluster  (the state stays in $state)
MSG
