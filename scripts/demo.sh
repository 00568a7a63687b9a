#!/usr/bin/env bash
# `make demo`: the product end to end on the local dev cluster.
#   1. dev cluster (etcd + kube-apiserver + controller manager + loopback kubelet)
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
until kubectl get serviceaccount default -n default >/dev/null 2>&1; do sleep 0.2; done

step "Starting a plain Squid pod to serve as the External proxy"
kubectl apply -f deploy/dev/squid-demo.yaml >/dev/null 2>&1 || true
until kubectl get serviceaccount default -n demo >/dev/null 2>&1; do sleep 0.2; done
kubectl apply -f deploy/dev/squid-demo.yaml
kubectl wait -n demo --for=condition=Ready pod/squid-demo --timeout=60s
external_host=$(kubectl get pod -n demo squid-demo -o jsonpath='{.status.podIP}')

step "Starting the operator (log: $state/operator.log)"
passphrase_file="$state/passphrase"
[ -s "$passphrase_file" ] || head -c 32 /dev/urandom | base64 >"$passphrase_file"
chmod 600 "$passphrase_file"
if [ -f "$state/operator.pid" ] && kill -0 "$(cat "$state/operator.pid")" 2>/dev/null; then
  echo "already running (pid $(cat "$state/operator.pid"))"
else
  EGRESS_PROXIES_PASSPHRASE_FILE="$passphrase_file" EGRESS_PROXIES_STATE_DIR="$state/operator" \
    nohup "$py" -m egress_proxies.cli run >"$state/operator.log" 2>&1 &
  echo $! >"$state/operator.pid"
fi

step "Applying the sample Proxies (examples/)"
kubectl apply -n demo -f examples/managed-proxy.yaml
sed "s/EXTERNAL_HOST/$external_host/" examples/external-proxy.yaml | kubectl apply -n demo -f -

step "Waiting for both Proxies to be provisioned (the first pulumi up takes ~30s)"
for proxy in squid-eu-1 partner-1; do
  if ! kubectl wait -n demo --for=condition=Provisioned "proxy/$proxy" --timeout=300s; then
    tail -n 30 "$state/operator.log" >&2
    fail "proxy $proxy was not provisioned; the operator log is above"
  fi
done
kubectl get proxies -n demo -o wide

step "The stacks, as the plain pulumi CLI sees them"
PULUMI_BACKEND_URL="file://$state/operator/backend" PULUMI_CONFIG_PASSPHRASE_FILE="$passphrase_file" \
  PULUMI_HOME="$state/operator/pulumi-home" PULUMI_SKIP_UPDATE_CHECK=true \
  pulumi stack ls --all

cat <<MSG

Everything keeps running. Try:
  export KUBECONFIG=$state/kubeconfig
  kubectl get proxies -A
  kubectl describe proxy -n demo squid-eu-1
  PULUMI_BACKEND_URL=file://$state/operator/backend PULUMI_CONFIG_PASSPHRASE_FILE=$passphrase_file \\
    pulumi stack history -s demo.squid-eu-1
Stop everything with: make demo-down
MSG
