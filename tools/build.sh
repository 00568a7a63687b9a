#!/usr/bin/env bash
# Builds the development toolchain (pulumi, pulumi-resource-kubernetes,
# kube-apiserver, kube-controller-manager, kubectl, etcd, the node's binaries,
# CoreDNS, kstatus, versitygw) from the Go module proxy and installs squid,
# redis-server, postgresql and chromium (with chromium-driver) from Debian.
# See docs/development.md.
#
#   tools/build.sh [BINARY...]   build what is missing (all by default)
#   tools/build.sh --bin-dir     print the directory to put on PATH; no build
#   tools/build.sh --regen [STEP...]  rewrite tools/go/<step>/go.mod + go.sum from versions.env
#                                     (every step by default)
#
# Binaries go to $CACHE/tools/<binary>-<version>-<recipe>/<binary>, with
# symlinks in $CACHE/bin, where CACHE=${EGRESS_PROXIES_CACHE:-$HOME/.cache/egress-proxies}
# and <recipe> hashes the wrapper module (go.mod, go.sum and any main package
# of its own, tools/go/<step>/*.go), the Go version and the build flags.
# A binary already in its directory is never rebuilt: delete the directory to
# force a rebuild.

set -euo pipefail

TOOLS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=versions.env
source "$TOOLS_DIR/versions.env"

CACHE_ROOT=${EGRESS_PROXIES_CACHE:-$HOME/.cache/egress-proxies}
BIN_DIR=$CACHE_ROOT/bin
STORE=$CACHE_ROOT/tools
LOG_DIR=$CACHE_ROOT/logs

ALL_BINARIES=(squid etcd pulumi pulumi-resource-kubernetes kube-apiserver kube-controller-manager kubectl
    kube-scheduler kubelet kube-proxy containerd containerd-shim-runc-v2 ctr coredns kstatus versitygw)

# A step is one `go build` in one wrapper module (tools/go/<step>/) of every
# binary of the step that is missing: its binaries share one module graph, so
# their common packages compile once and their links overlap. The plugin is
# verified with the CLI, so pulumi comes before it.
# kstatus is the project's own main package (tools/go/kstatus/main.go) over
# sigs.k8s.io/cli-utils, not an upstream command.
STEPS=(pulumi pulumi-resource-kubernetes kubernetes etcd containerd coredns kstatus versitygw)
declare -A STEP_BINARIES=(
    [pulumi]="pulumi"
    [pulumi-resource-kubernetes]="pulumi-resource-kubernetes"
    [kubernetes]="kube-apiserver kube-controller-manager kubectl kube-scheduler kubelet kube-proxy"
    [etcd]="etcd"
    [containerd]="containerd containerd-shim-runc-v2 ctr"
    [coredns]="coredns"
    [kstatus]="kstatus"
    [versitygw]="versitygw"
)
# Cold wall time of each whole step with empty Go caches on a 2-core machine
# shared with other work (load average about 8), measured with this builder
# on 2026-12-02 (docs/development.md "Measured cost"; versitygw 28 s on
# 2026-12-06, its modules already downloaded): the estimate until this cache has
# timed a build of its own.
declare -A STEP_COLD_SECONDS=([pulumi]=968 [pulumi-resource-kubernetes]=1876 [kubernetes]=1072 [etcd]=47 [containerd]=180
    [coredns]=365 [kstatus]=127 [versitygw]=30)

# Compiler flags of every go build, the plugin's schema generator's too, so
# that all builds share the compiled packages in the Go build cache. No
# compiler debug information: the links strip it anyway (-ldflags=-w).
GO_BUILD_FLAGS=(-trimpath -gcflags=all=-dwarf=false)

REGEN=0        # --regen given
REGEN_STEPS=() # the steps named after --regen (all when empty)
CURRENT=""    # what is being worked on, for error messages
LOG_FILE=""   # log of the current step
BUILD_TMP=""  # staging dir of the current build, removed on exit
TICKER_PID="" # progress printer of the current step, stopped on exit

log() { printf '[tools] %s\n' "$*" >&2; }

# The words of a command, shell-quoted where needed (copy-pasteable).
shell_words() {
    local words
    printf -v words '%q ' "$@"
    printf '%s' "${words% }"
}

die() {
    log "ERROR: $*"
    exit 1
}

minutes() {
    printf '%dm%02ds' $(($1 / 60)) $(($1 % 60))
}

since() {
    minutes $(($(date +%s) - $1))
}

# start_ticker WHAT START ESTIMATE: a line on stderr every minute while a step runs.
start_ticker() {
    (
        while sleep 60 >/dev/null 2>&1; do
            log "  $1: $(since "$2") elapsed (estimate $3)"
        done
    ) &
    TICKER_PID=$!
}

stop_ticker() {
    if [[ -n $TICKER_PID ]]; then
        kill "$TICKER_PID" 2>/dev/null || true
        wait "$TICKER_PID" 2>/dev/null || true
        TICKER_PID=""
    fi
}

cleanup() {
    stop_ticker
    if [[ -n $BUILD_TMP ]]; then
        chmod -R u+w "$BUILD_TMP" 2>/dev/null || true
        rm -rf "$BUILD_TMP"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# run CMD...: runs a command with its output in $LOG_FILE; on failure names
# the binary and the command, shows the tail of the log and exits non-zero.
run() {
    printf '+ [%s] %s\n' "$(date +%T)" "$(shell_words "$@")" >>"$LOG_FILE"
    if ! "$@" >>"$LOG_FILE" 2>&1; then
        log "FAILED: ${CURRENT:-toolchain}"
        log "command: $(shell_words "$@")"
        log "last lines of $LOG_FILE:"
        tail -n 40 "$LOG_FILE" | sed 's/^/    /' >&2
        exit 1
    fi
}

go_env() {
    export CGO_ENABLED=0 GOWORK=off
    # Never download another Go toolchain: fail clearly if this Go is too old.
    export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
    export GOFLAGS=$1
}

# ---------------------------------------------------------------------------
# Wrapper modules: tools/go/<step>/go.mod requires the upstream modules, turns
# each of their local-path replaces into a pinned version and copies their
# other replaces and godebug settings; `tool` lines name the main packages.
# A wrapper may hold a main package of its own (tools/go/coredns/main.go: CoreDNS
# with a chosen set of plugins), built as the wrapper module's root package.

# wrapper_sources STEP: the Go files of a wrapper's own main package, if any.
wrapper_sources() {
    compgen -G "$TOOLS_DIR/go/$1/*.go" | LC_ALL=C sort || true
}

# Reads `go mod edit -json` of an upstream go.mod on stdin; prints the
# `go mod edit` flags for the wrapper, one per line. argv[1]: the version that
# stands in for upstream's local-path replaces.
# shellcheck disable=SC2016 # Python source, not shell
UPSTREAM_FLAGS_PY='
import json, sys
mod = json.load(sys.stdin)
pinned = sys.argv[1]
required = {r["Path"] for r in mod.get("Require") or []}
print("-go=" + mod["Go"])
for g in mod.get("GoDebug") or []:
    print("-godebug=%s=%s" % (g["Key"], g["Value"]))
for r in mod.get("Replace") or []:
    old, new = r["Old"], r["New"]
    if new.get("Version"):
        src = old["Path"] + ("@" + old["Version"] if old.get("Version") else "")
        print("-replace=%s=%s@%s" % (src, new["Path"], new["Version"]))
    elif old["Path"] in required:
        print("-replace=%s=%s@%s" % (old["Path"], old["Path"], pinned))
    else:
        print("[tools]   dropped local replace of unused %s" % old["Path"], file=sys.stderr)
'

# regen_wrapper NAME "MODULE VERSION PINNED_LOCAL_VERSION"... -- TOOL_PACKAGE...
# Several upstream modules in one wrapper share one module graph: one version
# of every module they have in common (the highest any of them requires).
regen_wrapper() {
    local name=$1 work upstream module version pinned upstream_gomod flag tool go_version=0
    shift
    local -a flags=() upstream_flags sources
    CURRENT="wrapper module tools/go/$name"
    LOG_FILE=$LOG_DIR/regen-$name.log
    : >"$LOG_FILE"
    work=$(mktemp -d)
    BUILD_TMP=$work
    run go -C "$work" mod init "egress-proxies.local/tools/$name"
    mapfile -t sources < <(wrapper_sources "$name")
    ((${#sources[@]} == 0)) || cp "${sources[@]}" "$work/"
    while (($# > 0)) && [[ $1 != -- ]]; do
        upstream=$1
        shift
        read -r module version pinned <<<"$upstream"
        log "regenerating tools/go/$name: $module@$version..."
        run go -C "$work" mod download -x "$module@$version"
        upstream_gomod=$(go -C "$work" mod download -json "$module@$version" |
            python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')
        mapfile -t upstream_flags < <(go mod edit -json "$upstream_gomod" |
            python3 -c "$UPSTREAM_FLAGS_PY" "$pinned")
        for flag in "${upstream_flags[@]}"; do
            if [[ $flag == -go=* ]]; then
                go_version=$(printf '%s\n' "$go_version" "${flag#-go=}" | sort -V | tail -n1)
            else
                flags+=("$flag")
            fi
        done
        flags+=("-require=$module@$version")
    done
    shift # --
    flags+=("-go=$go_version")
    for tool in "$@"; do flags+=("-tool=$tool"); done
    run go -C "$work" mod edit "${flags[@]}"
    run go -C "$work" mod tidy
    mkdir -p "$TOOLS_DIR/go/$name"
    cp "$work/go.mod" "$work/go.sum" "$TOOLS_DIR/go/$name/"
    rm -rf "$work"
    BUILD_TMP=""
}

# regen_kstatus: tools/go/kstatus is the project's own program, so its go.mod
# is not derived from an upstream one: it requires cli-utils at the pinned
# version and the k8s.io modules at the cluster's (whose compiled packages the
# kubernetes step leaves in the Go build cache).
regen_kstatus() {
    local work
    CURRENT="module tools/go/kstatus"
    LOG_FILE=$LOG_DIR/regen-kstatus.log
    : >"$LOG_FILE"
    work=$(mktemp -d)
    BUILD_TMP=$work
    log "regenerating tools/go/kstatus: sigs.k8s.io/cli-utils@$CLI_UTILS_VERSION..."
    cp "$TOOLS_DIR/go/kstatus/main.go" "$work/"
    run go -C "$work" mod init "egress-proxies.local/tools/kstatus"
    run go -C "$work" get "sigs.k8s.io/cli-utils@$CLI_UTILS_VERSION" \
        "k8s.io/apimachinery@$KUBERNETES_STAGING_VERSION" "k8s.io/client-go@$KUBERNETES_STAGING_VERSION"
    run go -C "$work" mod tidy
    cp "$work/go.mod" "$work/go.sum" "$TOOLS_DIR/go/kstatus/"
    rm -rf "$work"
    BUILD_TMP=""
}

# wants_regen STEP: the step was named after --regen, or none was.
wants_regen() {
    ((${#REGEN_STEPS[@]} == 0)) || [[ " ${REGEN_STEPS[*]} " == *" $1 "* ]]
}

regen_all() {
    command -v python3 >/dev/null || die "--regen needs python3"
    local step
    for step in "${REGEN_STEPS[@]}"; do
        [[ " ${STEPS[*]} " == *" $step "* ]] || die "unknown step $step (steps: ${STEPS[*]})"
    done
    go_env "-mod=mod"
    if wants_regen pulumi; then
        regen_wrapper pulumi "github.com/pulumi/pulumi/pkg/v3 $PULUMI_VERSION $PULUMI_VERSION" \
            -- "$(binary_package pulumi)"
    fi
    if wants_regen pulumi-resource-kubernetes; then
        # Not in the CLI's wrapper: the plugin does not compile against the CLI's
        # pulumi pkg/v3 (docs/development.md, "Why the plugin keeps its own pins").
        regen_wrapper pulumi-resource-kubernetes \
            "github.com/pulumi/pulumi-kubernetes/provider/v4 $PULUMI_KUBERNETES_PROVIDER_MODULE $PULUMI_KUBERNETES_SDK_MODULE" \
            -- "$(binary_package pulumi-resource-kubernetes)"
    fi
    if wants_regen kubernetes; then
        regen_wrapper kubernetes \
            "k8s.io/kubernetes $KUBERNETES_VERSION $KUBERNETES_STAGING_VERSION" \
            -- "$(binary_package kube-apiserver)" "$(binary_package kube-controller-manager)" \
            "$(binary_package kubectl)" "$(binary_package kube-scheduler)" "$(binary_package kubelet)" \
            "$(binary_package kube-proxy)"
    fi
    if wants_regen etcd; then
        regen_wrapper etcd "go.etcd.io/etcd/server/v3 $ETCD_VERSION $ETCD_VERSION" \
            -- "$(binary_package etcd)"
    fi
    if wants_regen containerd; then
        regen_wrapper containerd \
            "github.com/containerd/containerd/v2 $CONTAINERD_VERSION $CONTAINERD_VERSION" \
            -- "$(binary_package containerd)" "$(binary_package containerd-shim-runc-v2)" \
            "$(binary_package ctr)"
    fi
    if wants_regen coredns; then
        # Its own main package (main.go) imports the plugins; no `tool` line.
        regen_wrapper coredns "github.com/coredns/coredns $COREDNS_VERSION $COREDNS_VERSION" --
    fi
    if wants_regen kstatus; then
        regen_kstatus
    fi
    if wants_regen versitygw; then
        regen_wrapper versitygw "github.com/versity/versitygw $VERSITYGW_VERSION $VERSITYGW_VERSION" \
            -- "$(binary_package versitygw)"
    fi
    log "done: review and commit tools/go/*/go.mod and go.sum"
}

# ---------------------------------------------------------------------------
# What each binary is.

binary_version() {
    case $1 in
    etcd) printf '%s' "$ETCD_VERSION" ;;
    pulumi) printf '%s' "$PULUMI_VERSION" ;;
    pulumi-resource-kubernetes) printf '%s' "$PULUMI_KUBERNETES_VERSION" ;;
    kube-apiserver | kube-controller-manager | kubectl | kube-scheduler | kubelet | kube-proxy)
        printf '%s' "$KUBERNETES_VERSION"
        ;;
    containerd | containerd-shim-runc-v2 | ctr) printf '%s' "$CONTAINERD_VERSION" ;;
    coredns) printf '%s' "$COREDNS_VERSION" ;;
    kstatus) printf '%s' "$CLI_UTILS_VERSION" ;;
    versitygw) printf '%s' "$VERSITYGW_VERSION" ;;
    esac
}

binary_package() {
    case $1 in
    etcd) printf '%s' go.etcd.io/etcd/server/v3 ;;
    pulumi) printf '%s' github.com/pulumi/pulumi/pkg/v3/cmd/pulumi ;;
    pulumi-resource-kubernetes)
        printf '%s' github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes
        ;;
    kube-apiserver | kube-controller-manager | kubectl | kube-scheduler | kubelet | kube-proxy)
        printf 'k8s.io/kubernetes/cmd/%s' "$1"
        ;;
    containerd | containerd-shim-runc-v2 | ctr) printf 'github.com/containerd/containerd/v2/cmd/%s' "$1" ;;
    coredns) printf '%s' egress-proxies.local/tools/coredns ;;
    kstatus) printf '%s' egress-proxies.local/tools/kstatus ;;
    versitygw) printf '%s' github.com/versity/versitygw/cmd/versitygw ;;
    esac
}

# binary_ldflags BINARY: the linker flags that stamp its version.
binary_ldflags() {
    local v=${KUBERNETES_VERSION#v} pkg
    printf '%s' "-s -w"
    case $1 in
    etcd)
        # The version string is a constant in go.etcd.io/etcd/api/v3/version;
        # only the commit is stamped by upstream's build script, and it is unknown here.
        printf ' %s' "-X go.etcd.io/etcd/api/v3/version.GitSHA=unknown"
        ;;
    pulumi)
        printf ' %s' "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION"
        ;;
    pulumi-resource-kubernetes)
        printf ' %s' "-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=${PULUMI_KUBERNETES_VERSION#v}"
        ;;
    containerd | containerd-shim-runc-v2 | ctr)
        printf ' %s' "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
        ;;
    versitygw) printf ' %s' "-X main.Version=$VERSITYGW_VERSION" ;;
    kube-apiserver | kube-controller-manager | kubectl | kube-scheduler | kubelet | kube-proxy)
        # What upstream's hack/lib/version.sh stamps, minus the (unknown) commit.
        for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
            printf ' %s' "-X $pkg.gitVersion=$KUBERNETES_VERSION" "-X $pkg.gitMajor=${v%%.*}" \
                "-X $pkg.gitMinor=$(cut -d. -f2 <<<"$v")" "-X $pkg.gitCommit=unknown" \
                "-X $pkg.gitTreeState=clean"
        done
        ;;
    esac
}

# check_wrapper STEP: the committed wrapper pins what versions.env says.
check_wrapper() {
    local gomod=$TOOLS_DIR/go/$1/go.mod module version pin
    [[ -f $gomod ]] || die "$gomod is missing: run tools/build.sh --regen"
    case $1 in
    pulumi) set -- "github.com/pulumi/pulumi/pkg/v3 $PULUMI_VERSION" ;;
    pulumi-resource-kubernetes)
        set -- "github.com/pulumi/pulumi-kubernetes/provider/v4 $PULUMI_KUBERNETES_PROVIDER_MODULE"
        ;;
    kubernetes) set -- "k8s.io/kubernetes $KUBERNETES_VERSION" ;;
    etcd) set -- "go.etcd.io/etcd/server/v3 $ETCD_VERSION" ;;
    containerd) set -- "github.com/containerd/containerd/v2 $CONTAINERD_VERSION" ;;
    coredns) set -- "github.com/coredns/coredns $COREDNS_VERSION" ;;
    kstatus) set -- "sigs.k8s.io/cli-utils $CLI_UTILS_VERSION" ;;
    versitygw) set -- "github.com/versity/versitygw $VERSITYGW_VERSION" ;;
    esac
    for pin in "$@"; do
        read -r module version <<<"$pin"
        grep -Eq "^[[:space:]]*(require[[:space:]]+)?$module $version([[:space:]]|$)" "$gomod" ||
            die "$gomod does not require $module $version (versions.env changed?): run tools/build.sh --regen"
    done
}

# recipe_id STEP: names what a step's binaries are built from (wrapper module,
# its own sources if it has any, Go, flags, stamps), so a changed recipe builds
# into new directories.
recipe_id() {
    local bin source
    {
        cat "$TOOLS_DIR/go/$1/go.mod" "$TOOLS_DIR/go/$1/go.sum"
        wrapper_sources "$1" | while read -r source; do cat "$source"; done
        go version
        printf '%s\n' "CGO_ENABLED=$CGO_ENABLED" "${GO_BUILD_FLAGS[@]}"
        for bin in ${STEP_BINARIES[$1]}; do binary_ldflags "$bin"; done
    } | sha256sum | cut -c1-12
}

binary_dir() { # BINARY RECIPE_ID
    printf '%s' "$STORE/$1-$(binary_version "$1")-$2"
}

# ---------------------------------------------------------------------------
# Building a step.

# The provider's main package go:embeds schema-embed.json and
# terraform-mapping-embed.json, which upstream generates (and gitignores) with
# `VERSION=... go generate` running cmd/pulumi-resource-kubernetes/generate.go.
# Copy the module source, run that same generate.go, and build from the copy.
prepare_kubernetes_provider() {
    local work=$1 module=github.com/pulumi/pulumi-kubernetes/provider/v4 src
    run go -C "$work" mod download "$module@$PULUMI_KUBERNETES_PROVIDER_MODULE"
    src=$(go -C "$work" list -m -f '{{.Dir}}' "$module")
    cp -R "$src" "$work/provider"
    chmod -R u+w "$work/provider"
    run go -C "$work" mod edit "-replace=$module=./provider"
    run go -C "$work" build "${GO_BUILD_FLAGS[@]}" -ldflags=-s -o "$work/gen-embed" \
        ./provider/cmd/pulumi-resource-kubernetes/generate.go
    run env -C "$work/provider/cmd/pulumi-resource-kubernetes" \
        "VERSION=${PULUMI_KUBERNETES_VERSION#v}" "$work/gen-embed"
}

# verify EXPECTED CMD...: the freshly built binary runs and reports its version.
verify() {
    local expected=$1 out
    shift
    printf '+ [%s] %s\n' "$(date +%T)" "$(shell_words "$@")" >>"$LOG_FILE"
    if ! out=$("$@" 2>&1) || ! grep -qF -- "$expected" <<<"$out"; then
        printf '%s\n' "$out" >>"$LOG_FILE"
        log "FAILED: $CURRENT: verification did not print '$expected'"
        log "command: $(shell_words "$@")"
        tail -n 20 <<<"$out" | sed 's/^/    /' >&2
        exit 1
    fi
    log "  $(grep -F -m1 -- "$expected" <<<"$out")"
}

# verify_binary BINARY PATH
verify_binary() {
    local bin=$1 path=$2
    case $bin in
    etcd) verify "etcd Version: ${ETCD_VERSION#v}" "$path" --version ;;
    pulumi)
        PULUMI_HOME=$BUILD_TMP/pulumi-home PULUMI_SKIP_UPDATE_CHECK=1 \
            verify "$PULUMI_VERSION" "$path" version
        ;;
    pulumi-resource-kubernetes)
        # The plugin has no --version flag: ask it for its schema through the
        # engine (which also proves the embedded schema is there), using the
        # CLI the pulumi step (always run before this one) installed.
        PULUMI_HOME=$BUILD_TMP/pulumi-home PULUMI_SKIP_UPDATE_CHECK=1 \
            PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true \
            verify "\"version\": \"${PULUMI_KUBERNETES_VERSION#v}\"" \
            "$(binary_dir pulumi "$(recipe_id pulumi)")/pulumi" package get-schema "$path"
        ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubelet | kube-proxy)
        verify "Kubernetes $KUBERNETES_VERSION" "$path" --version
        ;;
    containerd | ctr) verify "$CONTAINERD_VERSION" "$path" --version ;;
    containerd-shim-runc-v2) verify "$CONTAINERD_VERSION" "$path" -v ;;
    coredns) verify "CoreDNS-${COREDNS_VERSION#v}" "$path" -version ;;
    kstatus) verify "sigs.k8s.io/cli-utils $CLI_UTILS_VERSION" "$path" -version ;;
    versitygw) verify "Version  : $VERSITYGW_VERSION" "$path" --version ;;
    kubectl) verify "Client Version: $KUBERNETES_VERSION" "$path" version --client ;;
    esac
}

link_binary() {
    local bin=$1 target=$2
    ln -sfn "$target" "$BIN_DIR/.$bin.new"
    mv -Tf "$BIN_DIR/.$bin.new" "$BIN_DIR/$bin"
}

# estimate STEP BINARY...: the last time this cache built the same binaries,
# else the measured cold time of the whole step.
estimate() {
    local step=$1 record
    shift
    record=$CACHE_ROOT/times/$step-$(tr ' ' '+' <<<"$*")
    if [[ -s $record ]]; then
        printf '%s, as the last build here' "$(minutes "$(cat "$record")")"
    elif [[ $* == "${STEP_BINARIES[$step]}" ]]; then
        printf '%s, as measured cold on 2 cores' "$(minutes "${STEP_COLD_SECONDS[$step]}")"
    else
        printf 'unknown'
    fi
}

# ensure_step STEP BINARY...: each binary cached, or all missing ones built in
# one go build, verified and moved into place.
ensure_step() {
    local step=$1 id bin dest start seconds eta out source
    shift
    local -a missing=() packages=() ldflags=()
    id=$(recipe_id "$step")
    for bin in "$@"; do
        dest=$(binary_dir "$bin" "$id")
        if [[ -x $dest/$bin ]]; then
            log "$bin $(binary_version "$bin"): cached"
            link_binary "$bin" "$dest/$bin"
        else
            missing+=("$bin")
        fi
    done
    ((${#missing[@]} > 0)) || return 0

    CURRENT="${missing[*]} (tools/go/$step)"
    check_wrapper "$step"
    eta=$(estimate "$step" "${missing[@]}")
    log "building ${missing[*]} in one go build (estimate $eta)..."
    start=$(date +%s)
    LOG_FILE=$LOG_DIR/$step-$id.log
    : >"$LOG_FILE"
    BUILD_TMP=$(mktemp -d "$STORE/.build-$step-$id.XXXXXX")
    start_ticker "$step" "$start" "${eta%%,*}"
    mkdir -p "$BUILD_TMP/work" "$BUILD_TMP/out"
    cp "$TOOLS_DIR/go/$step/go.mod" "$TOOLS_DIR/go/$step/go.sum" "$BUILD_TMP/work/"
    wrapper_sources "$step" | while read -r source; do cp "$source" "$BUILD_TMP/work/"; done
    for bin in "${missing[@]}"; do
        if [[ $bin == pulumi-resource-kubernetes ]]; then
            prepare_kubernetes_provider "$BUILD_TMP/work"
        fi
        packages+=("$(binary_package "$bin")")
        ldflags+=("-ldflags=$(binary_package "$bin")=$(binary_ldflags "$bin")")
    done
    out=$BUILD_TMP/out/
    ((${#missing[@]} > 1)) || out+=${missing[0]}
    run go -C "$BUILD_TMP/work" build "${GO_BUILD_FLAGS[@]}" "${ldflags[@]}" -o "$out" "${packages[@]}"
    stop_ticker

    for bin in "${missing[@]}"; do
        CURRENT="$bin $(binary_version "$bin")"
        seconds=$(($(stat -c %Y "$BUILD_TMP/out/$bin") - start))
        verify_binary "$bin" "$BUILD_TMP/out/$bin"
        dest=$(binary_dir "$bin" "$id")
        rm -rf "$dest" # a directory without the binary is a leftover
        mkdir -p "$dest"
        mv "$BUILD_TMP/out/$bin" "$dest/$bin"
        link_binary "$bin" "$dest/$bin"
        log "$CURRENT: built, linked after $(minutes "$seconds") ($(du -sh "$dest/$bin" | cut -f1))"
    done
    cleanup
    BUILD_TMP=""
    seconds=$(($(date +%s) - start))
    mkdir -p "$CACHE_ROOT/times"
    printf '%s\n' "$seconds" >"$CACHE_ROOT/times/$step-$(tr ' ' '+' <<<"${missing[*]}")"
    log "${missing[*]}: built in $(minutes "$seconds"), log: $LOG_FILE"
}

# squid, redis-server, postgresql and chromium come from Debian: install what is missing, build and link nothing.
ensure_debian_packages() {
    local pkg start
    local -a missing=() sudo=()
    # shellcheck disable=SC2086 # word-split the package list
    for pkg in $DEBIAN_PACKAGES; do
        dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$pkg")
    done
    CURRENT="Debian packages ${missing[*]}"
    if ((${#missing[@]} > 0)); then
        command -v apt-get >/dev/null || die "missing Debian packages (${missing[*]}) and no apt-get"
        ((EUID == 0)) || sudo=(sudo)
        log "installing Debian packages: ${missing[*]} (apt-get)..."
        start=$(date +%s)
        LOG_FILE=$LOG_DIR/apt.log
        : >"$LOG_FILE"
        run "${sudo[@]}" apt-get update
        run "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
        log "Debian packages installed in $(since "$start")"
    fi
    log "squid $(dpkg-query -W -f='${Version}' squid): installed (Debian package, /usr/sbin/squid)"
    log "redis-server $(dpkg-query -W -f='${Version}' redis-server): installed (Debian package, tests only)"
    log "chromium $(dpkg-query -W -f='${Version}' chromium): installed (Debian package, browser tests only)"
    log "postgresql $(dpkg-query -W -f='${Version}' postgresql): installed (Debian package, state backend tests only)"
}

usage() {
    sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
    printf '\nbinaries: %s\n' "${ALL_BINARIES[*]}"
}

main() {
    local -a wanted=() step_wanted
    local arg bin start step
    for arg in "$@"; do
        case $arg in
        --bin-dir)
            printf '%s\n' "$BIN_DIR"
            return
            ;;
        --regen)
            REGEN=1
            ;;
        -h | --help)
            usage
            return
            ;;
        -*) die "unknown option $arg (see --help)" ;;
        *)
            if ((REGEN)); then
                REGEN_STEPS+=("$arg")
                continue
            fi
            [[ " ${ALL_BINARIES[*]} " == *" $arg "* ]] || die "unknown binary $arg (see --help)"
            wanted+=("$arg")
            ;;
        esac
    done
    if ((REGEN)); then
        mkdir -p "$LOG_DIR"
        regen_all
        return
    fi
    ((${#wanted[@]} > 0)) || wanted=("${ALL_BINARIES[@]}")
    # The plugin is verified through the pulumi CLI.
    [[ " ${wanted[*]} " != *" pulumi-resource-kubernetes "* ]] || wanted+=(pulumi)

    command -v go >/dev/null || die "go is not on PATH"
    mkdir -p "$STORE" "$BIN_DIR" "$LOG_DIR"
    # One builder at a time; then any staging dir left by an interrupted
    # build (killed before its trap ran) is stale.
    exec 9>"$CACHE_ROOT/.lock"
    if ! flock -n 9; then
        log "waiting for another tools/build.sh to finish..."
        flock 9
    fi
    rm -rf "$STORE"/.build-*
    go_env "-mod=readonly"

    start=$(date +%s)
    [[ " ${wanted[*]} " != *" squid "* ]] || ensure_debian_packages
    for step in "${STEPS[@]}"; do
        step_wanted=()
        for bin in ${STEP_BINARIES[$step]}; do
            [[ " ${wanted[*]} " != *" $bin "* ]] || step_wanted+=("$bin")
        done
        ((${#step_wanted[@]} == 0)) || ensure_step "$step" "${step_wanted[@]}"
    done
    log "toolchain ready in $(since "$start"); bin dir: $BIN_DIR"
}

main "$@"; exit # one line: edits to this file cannot affect a running build
