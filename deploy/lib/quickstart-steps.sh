# Steps shared by the kind quickstart (deploy/kind/quickstart.sh) and `make demo`
# (scripts/demo.sh, on the dev cluster): what the demo proves is what the
# quickstart does. Source it after defining:
#   k             kubectl against the cluster (a function)
#   KUBECTL_ARGS  the same as kubectl flags (an array; port-forward runs kubectl itself)
#   step, fail    progress and error reporting
#   operator_logs print the operator's last log lines
# shellcheck shell=bash

QUICKSTART_NAMESPACE=egress-proxies

random_secret() {
  head -c 32 /dev/urandom | base64 | tr -d '/+=\n'
}

# prepare_secrets DIR: the passphrase and discovery token, created once and
# reused on every run (the stacks need the same passphrase forever).
prepare_secrets() {
  (
    umask 077
    [ -s "$1/passphrase" ] || random_secret >"$1/passphrase"
    [ -s "$1/discovery-token" ] || random_secret >"$1/discovery-token"
  )
}

# create_namespace_and_secrets REPO DIR TOKEN_NAME: the namespace of deploy/base
# and the two Secrets the base reads but never overwrites.
create_namespace_and_secrets() {
  k apply -f "$1/deploy/base/namespace.yaml"
  k -n "$QUICKSTART_NAMESPACE" create secret generic stack-passphrase \
    --from-file=passphrase="$2/passphrase" --dry-run=client -o yaml | k apply -f -
  k -n "$QUICKSTART_NAMESPACE" create secret generic discovery-tokens \
    --from-file="$3"="$2/discovery-token" --dry-run=client -o yaml | k apply -f -
}

# apply_and_roll_out OVERLAY_DIR: `kubectl apply -k`, then wait for the rollout.
apply_and_roll_out() {
  local existed=false
  if k -n "$QUICKSTART_NAMESPACE" get deployment egress-proxies >/dev/null 2>&1; then
    existed=true
  fi
  k apply -k "$1" || fail "kubectl apply -k $1 failed"
  k wait --for=condition=Established crd/proxies.crawl.example.com --timeout=60s
  if [ "$existed" = true ]; then
    # Same tag, new image: only a restart picks it up.
    k -n "$QUICKSTART_NAMESPACE" rollout restart deployment/egress-proxies
  fi
  step "Waiting for the operator to be ready"
  if ! k -n "$QUICKSTART_NAMESPACE" rollout status deployment/egress-proxies --timeout=300s; then
    operator_logs
    fail "the operator did not become ready"
  fi
  k -n "$QUICKSTART_NAMESPACE" get pods -o wide
}

# wait_proxies_ready NAMESPACE PROXY...: each Proxy Ready, or its description and the log.
wait_proxies_ready() {
  local namespace=$1 proxy
  shift
  for proxy in "$@"; do
    if ! k -n "$namespace" wait --for=jsonpath='{.status.phase}'=Ready "proxy/$proxy" --timeout=300s; then
      k -n "$namespace" describe proxy "$proxy" >&2 || true
      operator_logs
      fail "proxy $proxy did not become Ready"
    fi
  done
  k -n "$namespace" get proxies -o wide
}

# port_forward_discovery PORT LOG: forward the discovery Service to 127.0.0.1:PORT;
# sets FORWARDER to kubectl's pid (the caller kills it on exit).
port_forward_discovery() {
  local port=$1 log=$2
  # kubectl itself in the background (not through k), so $! is its pid.
  kubectl "${KUBECTL_ARGS[@]}" -n "$QUICKSTART_NAMESPACE" port-forward service/egress-proxies \
    "$port:discovery" >"$log" 2>&1 &
  FORWARDER=$!
  for _ in $(seq 1 50); do
    if curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
      echo "discovery API on http://127.0.0.1:$port"
      return
    fi
    kill -0 "$FORWARDER" 2>/dev/null || fail "kubectl port-forward exited: $(cat "$log")"
    sleep 0.2
  done
  fail "the discovery API does not answer on 127.0.0.1:$port"
}

# lease_from_host PORT TOKEN SELECTOR_JSON TARGET: one lease through the
# forwarded Service, retried while the operator has not probed the proxy yet
# (409); prints the lease with its password redacted and sets LEASE to its JSON.
lease_from_host() {
  local port=$1 token=$2 selector=$3 target=$4 answer code attempt
  for attempt in $(seq 1 60); do
    answer=$(curl -sS -w '\n%{http_code}' -X POST "http://127.0.0.1:$port/v1/leases" \
      -H "Authorization: Bearer $token" -H "Content-Type: application/json" \
      -d "{\"selector\":$selector,\"ttlSeconds\":300,\"target\":\"$target\"}")
    code=${answer##*$'\n'}
    LEASE=${answer%$'\n'*}
    [ "$code" = 409 ] || break
    [ "$attempt" = 1 ] && echo "waiting for the operator to probe the proxy..."
    sleep 1
  done
  [ "$code" = 201 ] || [ "$code" = 200 ] || fail "the lease request answered HTTP $code: $LEASE"
  echo "$LEASE" | sed 's/"password": *"[^"]*"/"password":"<redacted>"/g; s#//\([^:/"]*\):[^@"]*@#//\1:<redacted>@#g'
}

# list_stacks BACKEND_URL PASSPHRASE_FILE PULUMI_HOME: the stacks, as the plain pulumi CLI sees
# them (a postgres:// backend's password comes from PGPASSWORD, as for the operator).
list_stacks() {
  PULUMI_BACKEND_URL="$1" PULUMI_CONFIG_PASSPHRASE_FILE="$2" PULUMI_HOME="$3" \
    PULUMI_SKIP_UPDATE_CHECK=true pulumi stack ls --all || fail "pulumi could not read the backend $1"
}
