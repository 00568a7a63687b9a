#!/usr/bin/env bash
# `make demo`: the kind quickstart's steps (deploy/kind/quickstart.sh), on the
# local dev cluster instead of kind, with the images `make tools` built instead
# of `docker build`:
#   1. the dev cluster (control plane and a real node: kubelet, containerd, runc),
#      whose node mounts $state/node/egress-proxies-state as kind's extraMount does
#   2. the passphrase and discovery-token Secrets
#   3. deploy/kind (the kustomize base on the mounted state dir) with the local
#      images, rolled out: the operator runs as a pod
#   4. the sample Proxies of examples/, waited for until Ready
#   5. a crawler pod that leases through the discovery Service by its DNS name
#      and fetches a page through the proxy
#   6. a lease from this machine through the port-forwarded Service
#   7. `pulumi stack ls --all` on the host, against the mounted backend
# With `ha` as the second argument (`make demo-ha`) it runs the HA layout
# instead (docs/operations.md "High availability"): Debian's PostgreSQL as a
# process on this machine, listening on the cluster's host address, holds
# the stacks; deploy/ha runs two operator pods (one at work), the discovery
# tier and its Redis pod; step 7 lists the stacks in PostgreSQL.
# Everything keeps running afterwards; `make demo-down` stops it.
set -Eeuo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
state=${1:-.state/demo}
mode=${2:-single}
pg_port=${EGRESS_PROXIES_DEMO_PG_PORT:-15432}
py=$repo/.venv/bin/python
port=${EGRESS_PROXIES_DEMO_PORT:-8090}
demo=demo
mkdir -p "$state"
state=$(cd "$state" && pwd)
FORWARDER=""

step() { printf '\n==> %s\n' "$*"; }
fail() {
  printf '\nERROR: %s\n' "$*" >&2
  exit 1
}
cleanup() {
  if [ -n "$FORWARDER" ]; then
    kill "$FORWARDER" 2>/dev/null || true
  fi
}
trap cleanup EXIT

KUBECTL_ARGS=(--kubeconfig "$state/kubeconfig")
k() {
  kubectl "${KUBECTL_ARGS[@]}" "$@"
}
operator_logs() {
  echo "--- operator log (last 40 lines) ---" >&2
  k -n egress-proxies logs deployment/egress-proxies --tail=40 >&2 || true
}
# shellcheck source=deploy/lib/quickstart-steps.sh
source "$repo/deploy/lib/quickstart-steps.sh"

step "Starting the dev cluster in $state"
"$py" -m egress_proxies.cli dev-cluster up --state-dir "$state" --detach
# Where pods reach this machine, and the node's view of the state volume.
host=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["host_address"])' "$state/ready")
volume=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["state_volume"])' "$state/ready")
squid_image=$(cat "$(bash "$repo/tools/images.sh" --dir)/squid.ref")

step "Preparing the Secrets' values in $state"
prepare_secrets "$state"
token=$(cat "$state/discovery-token")
echo "passphrase: $state/passphrase (keep it: the stacks cannot be decrypted without it)"

step "Creating the namespace and the Secrets"
create_namespace_and_secrets "$repo" "$state" demo

if [ "$mode" = ha ]; then
  # The cluster's /16: its pods, and the host's address in it.
  block=$("$py" -c 'import ipaddress, sys; print(ipaddress.ip_network(sys.argv[1] + "/16", strict=False))' "$host")
  step "Starting PostgreSQL (Debian's) on $host:$pg_port for the stacks, data in $state/postgres"
  (
    umask 077
    [ -s "$state/postgres-password" ] || random_secret >"$state/postgres-password"
  )
  if ! pg_isready -q -h "$host" -p "$pg_port" 2>/dev/null; then
    (
      cd "$repo" # harness/ is imported from the checkout
      nohup "$py" -m harness.postgres serve "$state/postgres" --host "$host" \
        --port "$pg_port" --clients "$block" --password-file "$state/postgres-password" \
        >"$state/postgres.out" 2>&1 &
      echo $! >"$state/postgres.pid"
    )
    for _ in $(seq 1 120); do
      pg_isready -q -h "$host" -p "$pg_port" && break
      sleep 0.5
    done
    pg_isready -q -h "$host" -p "$pg_port" || fail "PostgreSQL did not start: $(tail -5 "$state/postgres.out")"
  fi
  backend_url="postgres://pulumi@$host:$pg_port/postgres?sslmode=disable"
  echo "state backend: $backend_url (password in $state/postgres-password)"
  k -n egress-proxies create secret generic state-backend \
    --from-literal=EGRESS_PROXIES_STATE_BACKEND="$backend_url" \
    --from-file=PGPASSWORD="$state/postgres-password" --dry-run=client -o yaml | k apply -f -

  step "Applying deploy/ha with the locally built images: two operator pods, the discovery tier, Redis"
  overlay=$(cd "$repo" && "$py" -m harness.deploy overlay "$state/overlay" ha)
  apply_and_roll_out "$overlay"
  for deployment in egress-proxies-redis egress-proxies-discovery; do
    k -n egress-proxies rollout status "deployment/$deployment" --timeout=300s
  done
  step "The replica at work: the live peer of the highest priority (kopf peering)"
  # shellcheck disable=SC2016 # a Go template, not shell
  k get clusterkopfpeering egress-proxies \
    -o go-template='{{range $pod, $peer := .status}}{{$pod}}  priority {{$peer.priority}}  lastseen {{$peer.lastseen}}{{"\n"}}{{end}}'
  echo "(--priority-by-start: the earlier start has the higher priority; the other pod stands by)"
else
  step "Applying deploy/kind with the locally built images"
  overlay=$(cd "$repo" && "$py" -m harness.deploy overlay "$state/overlay")
  apply_and_roll_out "$overlay"
  backend_url="file://$volume/backend"
fi

step "Serving a local page for the health checks and the crawlers ($host:18080)"
mkdir -p "$state/origin"
echo "hello through an egress proxy" >"$state/origin/index.html"
if ! curl -s -o /dev/null "http://$host:18080/"; then
  nohup "$py" -m http.server 18080 --bind "$host" --directory "$state/origin" \
    >"$state/origin.log" 2>&1 &
  echo $! >"$state/origin.pid"
fi

step "Creating the sample Proxies (examples/) and a plain Squid pod as the External proxy"
demo_squid=$(sed "s#SQUID_IMAGE#$squid_image#" "$repo/deploy/dev/squid-demo.yaml")
k apply -f - <<<"$demo_squid"
k wait -n "$demo" --for=condition=Ready pod/squid-demo --timeout=120s
external_host=$(k get pod -n "$demo" squid-demo -o jsonpath='{.status.podIP}')
local_check="s#https://www.gstatic.com/generate_204#http://$host:18080/#; s/expectedStatus: 204/expectedStatus: 200/"
sed "$local_check" "$repo/examples/managed-proxy.yaml" | k apply -n "$demo" -f -
sed "$local_check; s/EXTERNAL_HOST/$external_host/" "$repo/examples/external-proxy.yaml" |
  k apply -n "$demo" -f -

step "Waiting for both Proxies to be Ready (the first pulumi up takes a minute)"
wait_proxies_ready "$demo" squid-eu-1 partner-1

step "A crawler pod leases a proxy in region eu by the Service's name and fetches the page"
k -n "$demo" create secret generic crawler-token --from-file=token="$state/discovery-token" \
  --dry-run=client -o yaml | k apply -f -
k -n "$demo" delete pod crawler --ignore-not-found >/dev/null
operator_image=$(cat "$(bash "$repo/tools/images.sh" --dir)/operator.ref")
k -n "$demo" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: crawler
spec:
  restartPolicy: Never
  securityContext:
    runAsNonRoot: true
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: crawler
      image: $operator_image
      command:
        - egress-proxies-client
        - run
        - --selector=region=eu
        - --target=$host
        - --
        - python3
        - -c
        - 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())'
        - http://$host:18080/index.html
      env:
        - name: EGRESS_PROXIES_API_URL
          value: http://egress-proxies.egress-proxies.svc:8090
        - name: EGRESS_PROXIES_TOKEN
          valueFrom:
            secretKeyRef:
              name: crawler-token
              key: token
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities:
          drop: [ALL]
YAML
k -n "$demo" wait --for=jsonpath='{.status.phase}'=Succeeded pod/crawler --timeout=120s ||
  fail "the crawler pod did not succeed: $(k -n "$demo" logs crawler 2>&1 | tail -5)"
k -n "$demo" logs crawler

step "Port-forwarding the discovery Service to 127.0.0.1:$port"
port_forward_discovery "$port" "$state/port-forward.log"

step "Leasing a proxy from the pool 'default' for 300 seconds, from this machine"
lease_from_host "$port" "$token" '{"pool":"default"}' "$host"

step "The stacks, as the pulumi CLI on the host sees them"
mkdir -p "$state/pulumi-home"
if [ "$mode" = ha ]; then
  PGPASSWORD=$(cat "$state/postgres-password")
  export PGPASSWORD
fi
list_stacks "$backend_url" "$state/passphrase" "$state/pulumi-home"

if [ "$mode" = ha ]; then
  cat <<MSG

Everything keeps running. Try:
  export KUBECONFIG=$state/kubeconfig
  kubectl get pods -n egress-proxies -o wide
  kubectl get clusterkopfpeering egress-proxies -o yaml     # who is at work
  kubectl -n egress-proxies delete pod ACTIVE_POD --grace-period=0 --force
  kubectl -n egress-proxies rollout restart deployment/egress-proxies
  PULUMI_BACKEND_URL='$backend_url' PGPASSWORD=\$(cat $state/postgres-password) \\
    PULUMI_CONFIG_PASSPHRASE_FILE=$state/passphrase pulumi stack history -s $demo.squid-eu-1
Stop everything with: make demo-down
MSG
  exit 0
fi

cat <<MSG

Everything keeps running. Try:
  export KUBECONFIG=$state/kubeconfig
  kubectl get pods -n egress-proxies
  kubectl get proxies -A
  kubectl logs -n egress-proxies deployment/egress-proxies
  kubectl -n egress-proxies port-forward service/egress-proxies $port:discovery
  PULUMI_BACKEND_URL=file://$volume/backend PULUMI_CONFIG_PASSPHRASE_FILE=$state/passphrase \\
    pulumi stack history -s $demo.squid-eu-1
Stop everything with: make demo-down
MSG
