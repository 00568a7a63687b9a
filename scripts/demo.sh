#!/usr/bin/env bash
# `make demo`: start the dev cluster, run a Squid pod on the loopback kubelet,
# fetch a page through it, and leave the cluster running for you to explore.
set -euo pipefail
state=${1:-.state/demo}
py=.venv/bin/python
step() { printf '\n==> %s\n' "$*"; }

step "Starting the dev cluster (etcd + kube-apiserver + loopback kubelet) in $state"
$py -m egress_proxies.cli dev-cluster up --state-dir "$state" --detach
export KUBECONFIG="$PWD/$state/kubeconfig"

step "Running a Squid pod (deploy/dev/squid-demo.yaml)"
until kubectl get serviceaccount default -n default >/dev/null 2>&1; do sleep 0.2; done
kubectl apply -f deploy/dev/squid-demo.yaml
until kubectl get serviceaccount default -n demo >/dev/null 2>&1; do sleep 0.2; done
kubectl apply -f deploy/dev/squid-demo.yaml >/dev/null
kubectl wait -n demo --for=condition=Ready pod/squid-demo --timeout=60s
kubectl get pods -n demo -o wide
pod_ip=$(kubectl get pod -n demo squid-demo -o jsonpath='{.status.podIP}')

step "Fetching a local page through the pod's squid at $pod_ip:3128"
origin_dir=$(mktemp -d)
echo "hello through squid" >"$origin_dir/index.html"
$py -u -m http.server 0 --bind 127.0.0.1 --directory "$origin_dir" >"$origin_dir/server.log" 2>&1 &
origin_pid=$!
trap 'kill $origin_pid 2>/dev/null; rm -rf "$origin_dir"' EXIT
until port=$(grep -o 'port [0-9]*' "$origin_dir/server.log" | cut -d' ' -f2) && [ -n "$port" ]; do sleep 0.1; done
curl --silent --show-error --include --proxy "http://$pod_ip:3128" "http://127.0.0.1:$port/index.html" | grep -E '^(HTTP|Via|hello)'

cat <<MSG

The dev cluster keeps running. Try:
  export KUBECONFIG=$PWD/$state/kubeconfig
  kubectl get nodes,pods -A -o wide
Stop everything with: make demo-down
MSG
