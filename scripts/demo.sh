#!/usr/bin/env bash
# `make demo`: the product end to end on the local dev cluster.
#   1. dev cluster (etcd, kube-apiserver, controller manager, scheduler and a real
#      node: kubelet + containerd + runc)
#   2. the operator, in the background, with its Pulumi state under $state/operator
#   3. two sample Proxies from examples/: one managed (a Squid pod through its own
#      Pulumi stack) and one External (the plain Squid pod of deploy/dev/)
#   4. kubectl get proxies, and the stacks as the plain pulumi CLI lists them
# Everything keeps running afterwards; `make demo-down` stops it.
set -euo pipefail
state=${1:-.state/demo}
py=.venv/bin/python
mkdir -p "$state"
state=$(cd "$state" && pwd)
step() { printf '\n==> %s\n' "$*"; }
fail() { printf '\nERROR: %s\n' "$*" >&2; exit 1; }

step "Starting the dev cluster in $state"
$py -m egress_proxies.cli dev-cluster up --state-dir "$state" --detach
export KUBECONFIG="$state/kubeconfig"
# Where pods reach this machine, and the squid image built by `make tools`.
host=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["host_address"])' "$state/ready")
squid_image=$(cat "$(bash tools/images.sh --dir)/squid.ref")
until kubectl get serviceaccount default -n default >/dev/null 2>&1; do sleep 0.2; done

step "Starting a plain Squid pod to serve as the External proxy"
demo_squid=$(sed "s#SQUID_IMAGE#$squid_image#" deploy/dev/squid-demo.yaml)
kubectl apply -f - <<<"$demo_squid" >/dev/null 2>&1 || true
until kubectl get serviceaccount default -n demo >/dev/null 2>&1; do sleep 0.2; done
kubectl apply -f - <<<"$demo_squid"
kubectl wait -n demo --for=condition=Ready pod/squid-demo --timeout=60s
external_host=$(kubectl get pod -n demo squid-demo -o jsonpath='{.status.podIP}')

step "Serving a local page for the health checks and the crawler ($host:18080)"
mkdir -p "$state/origin"
echo "hello through an egress proxy" >"$state/origin/index.html"
if ! curl -s -o /dev/null "http://$host:18080/"; then
  nohup "$py" -m http.server 18080 --bind "$host" --directory "$state/origin" \
    >"$state/origin.log" 2>&1 &
  echo $! >"$state/origin.pid"
fi

step "Starting the operator (log: $state/operator.log, discovery API on 127.0.0.1:8090)"
passphrase_file="$state/passphrase"
[ -s "$passphrase_file" ] || head -c 32 /dev/urandom | base64 >"$passphrase_file"
chmod 600 "$passphrase_file"
mkdir -p "$state/discovery-tokens"
[ -s "$state/discovery-tokens/demo" ] || head -c 24 /dev/urandom | base64 | tr -d '/+=' \
  >"$state/discovery-tokens/demo"
token=$(cat "$state/discovery-tokens/demo")
if [ -f "$state/operator.pid" ] && kill -0 "$(cat "$state/operator.pid")" 2>/dev/null; then
  echo "already running (pid $(cat "$state/operator.pid"))"
else
  EGRESS_PROXIES_PASSPHRASE_FILE="$passphrase_file" EGRESS_PROXIES_STATE_DIR="$state/operator" \
    EGRESS_PROXIES_DISCOVERY_HOST=127.0.0.1 EGRESS_PROXIES_SQUID_IMAGE="$squid_image" \
    EGRESS_PROXIES_DISCOVERY_TOKENS_DIR="$state/discovery-tokens" \
    nohup "$py" -m egress_proxies.cli run >"$state/operator.log" 2>&1 &
  echo $! >"$state/operator.pid"
fi

step "Applying the sample Proxies (examples/), health-checked against the local page"
local_check="s#https://www.gstatic.com/generate_204#http://$host:18080/#; s/expectedStatus: 204/expectedStatus: 200/"
sed "$local_check" examples/managed-proxy.yaml | kubectl apply -n demo -f -
sed "$local_check; s/EXTERNAL_HOST/$external_host/" examples/external-proxy.yaml |
  kubectl apply -n demo -f -

step "Waiting for both Proxies to be Ready (the first pulumi up takes ~30s)"
for proxy in squid-eu-1 partner-1; do
  if ! kubectl wait -n demo --for=condition=Healthy "proxy/$proxy" --timeout=300s; then
    tail -n 30 "$state/operator.log" >&2
    fail "proxy $proxy did not become Ready; the operator log is above"
  fi
done
kubectl get proxies -n demo -o wide

step "A crawler leases the managed proxy in region eu and fetches the page through it"
# A freshly (re)started operator knows a proxy once its watch has listed it and
# its health engine has probed it: until then a lease is refused (409), so retry.
for attempt in $(seq 1 60); do
  lease=$(curl -sS -w '\n%{http_code}' -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' \
    -d "{\"selector\": {\"region\": \"eu\"}, \"ttlSeconds\": 60, \"target\": \"$host\"}" \
    http://127.0.0.1:8090/v1/leases)
  code=${lease##*$'\n'}
  lease=${lease%$'\n'*}
  [ "$code" = 409 ] || break
  [ "$attempt" = 1 ] && echo "waiting for the operator to probe the proxy..."
  sleep 1
done
echo "$lease" | "$py" -m json.tool | sed 's/"password": ".*"/"password": "<redacted>"/; s#//crawler:[^@]*@#//crawler:<redacted>@#'
proxy_url=$(echo "$lease" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["proxy"]["urlWithCredentials"])')
lease_id=$(echo "$lease" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["leaseId"])')
curl -sS --proxy "$proxy_url" "http://$host:18080/index.html"
curl -sS -o /dev/null -w 'release: HTTP %{http_code}\n' -X DELETE \
  -H "Authorization: Bearer $token" "http://127.0.0.1:8090/v1/leases/$lease_id"

step "The stacks, as the plain pulumi CLI sees them"
PULUMI_BACKEND_URL="file://$state/operator/backend" PULUMI_CONFIG_PASSPHRASE_FILE="$passphrase_file" \
  PULUMI_HOME="$state/operator/pulumi-home" PULUMI_SKIP_UPDATE_CHECK=true \
  pulumi stack ls --all

cat <<MSG

Everything keeps running. Try:
  export KUBECONFIG=$state/kubeconfig
  kubectl get proxies -A
  kubectl describe proxy -n demo squid-eu-1
  curl -H "Authorization: Bearer $token" http://127.0.0.1:8090/v1/proxies
  PULUMI_BACKEND_URL=file://$state/operator/backend PULUMI_CONFIG_PASSPHRASE_FILE=$passphrase_file \\
    pulumi stack history -s demo.squid-eu-1
Stop everything with: make demo-down
MSG
