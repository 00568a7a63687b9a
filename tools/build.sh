#!/usr/bin/env bash
# Builds the development toolchain (pulumi, pulumi-resource-kubernetes,
# kube-apiserver, kube-controller-manager, kubectl, etcd) from the Go module
# proxy and installs squid and redis-server from Debian. See docs/development.md.
#
#   tools/build.sh [BINARY...]   build what is missing (all by default)
#   tools/build.sh --bin-dir     print the directory to put on PATH; no build
#   tools/build.sh --regen       rewrite tools/go/*/go.mod + go.sum from versions.env
#
# Binaries go to $CACHE/tools/<binary>-<version>/<binary>, with symlinks in
# $CACHE/bin, where CACHE=${EGRESS_PROXIES_CACHE:-$HOME/.cache/egress-proxies}.
# A binary already in its directory is never rebuilt: delete the directory to
# force a rebuild.

# shellcheck disable=SC2317 # build_<binary> are called indirectly, as "build_$bin"
set -euo pipefail

TOOLS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=versions.env
source "$TOOLS_DIR/versions.env"

CACHE_ROOT=${EGRESS_PROXIES_CACHE:-$HOME/.cache/egress-proxies}
BIN_DIR=$CACHE_ROOT/bin
STORE=$CACHE_ROOT/tools
LOG_DIR=$CACHE_ROOT/logs

ALL_BINARIES=(squid etcd pulumi pulumi-resource-kubernetes kube-apiserver kube-controller-manager kubectl)

CURRENT=""   # "<binary> <version>" being worked on, for error messages
LOG_FILE=""  # log of the current step
BUILD_TMP="" # staging dir of the current build, removed on exit

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

since() {
    local s=$(($(date +%s) - $1))
    printf '%dm%02ds' $((s / 60)) $((s % 60))
}

cleanup() {
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
# Wrapper modules: tools/go/<name>/go.mod requires the upstream module, turns
# each of its local-path replaces into a pinned version and copies its other
# replaces and godebug settings; `tool` lines name the main packages.

# Reads `go mod edit -json` of the upstream go.mod on stdin; prints the
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

# regen_wrapper NAME MODULE VERSION PINNED_LOCAL_VERSION TOOL_PACKAGE...
regen_wrapper() {
    local name=$1 module=$2 version=$3 pinned=$4
    shift 4
    local work upstream_gomod tool
    local -a flags
    CURRENT="wrapper module tools/go/$name ($module@$version)"
    LOG_FILE=$LOG_DIR/regen-$name.log
    : >"$LOG_FILE"
    log "regenerating tools/go/$name ($module@$version)..."
    work=$(mktemp -d)
    BUILD_TMP=$work
    run go -C "$work" mod init "egress-proxies.local/tools/$name"
    run go -C "$work" mod download -x "$module@$version"
    upstream_gomod=$(go -C "$work" mod download -json "$module@$version" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')
    mapfile -t flags < <(go mod edit -json "$upstream_gomod" | python3 -c "$UPSTREAM_FLAGS_PY" "$pinned")
    flags+=("-require=$module@$version")
    for tool in "$@"; do flags+=("-tool=$tool"); done
    run go -C "$work" mod edit "${flags[@]}"
    run go -C "$work" mod tidy
    mkdir -p "$TOOLS_DIR/go/$name"
    cp "$work/go.mod" "$work/go.sum" "$TOOLS_DIR/go/$name/"
    rm -rf "$work"
    BUILD_TMP=""
}

regen_all() {
    command -v python3 >/dev/null || die "--regen needs python3"
    go_env "-mod=mod"
    regen_wrapper pulumi github.com/pulumi/pulumi/pkg/v3 "$PULUMI_VERSION" "$PULUMI_VERSION" \
        github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
    regen_wrapper pulumi-resource-kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4 \
        "$PULUMI_KUBERNETES_PROVIDER_MODULE" "$PULUMI_KUBERNETES_SDK_MODULE" \
        github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes
    regen_wrapper kubernetes k8s.io/kubernetes "$KUBERNETES_VERSION" "$KUBERNETES_STAGING_VERSION" \
        k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kubectl
    regen_wrapper etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "$ETCD_VERSION" \
        go.etcd.io/etcd/server/v3
    log "done: review and commit tools/go/*/go.mod and go.sum"
}

# ---------------------------------------------------------------------------
# Building one binary.

# check_wrapper NAME MODULE VERSION: the committed wrapper pins what versions.env says.
check_wrapper() {
    local gomod=$TOOLS_DIR/go/$1/go.mod
    [[ -f $gomod ]] || die "$gomod is missing: run tools/build.sh --regen"
    grep -Eq "^[[:space:]]*(require[[:space:]]+)?$2 $3([[:space:]]|$)" "$gomod" ||
        die "$gomod does not require $2 $3 (versions.env changed?): run tools/build.sh --regen"
}

# go_build WRAPPER PACKAGE OUT LDFLAGS: builds PACKAGE to OUT in a copy of
# the wrapper module made in $BUILD_TMP (the repo stays untouched).
go_build() {
    local wrapper=$1 pkg=$2 out=$3 ldflags=$4
    local work=$BUILD_TMP/work
    mkdir -p "$work"
    cp "$TOOLS_DIR/go/$wrapper/go.mod" "$TOOLS_DIR/go/$wrapper/go.sum" "$work/"
    if [[ $wrapper == pulumi-resource-kubernetes ]]; then
        prepare_kubernetes_provider "$work"
    fi
    run go -C "$work" build -trimpath -ldflags "-s -w $ldflags" -o "$out" "$pkg"
}

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
    run go -C "$work" build -o "$work/gen-embed" ./provider/cmd/pulumi-resource-kubernetes/generate.go
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

link_binary() {
    local bin=$1 target=$2
    ln -sfn "$target" "$BIN_DIR/.$bin.new"
    mv -Tf "$BIN_DIR/.$bin.new" "$BIN_DIR/$bin"
}

# ensure_binary BINARY VERSION: cached, or built, verified and moved into place.
ensure_binary() {
    local bin=$1 version=$2 dest start
    dest=$STORE/$bin-$version
    CURRENT="$bin $version"
    if [[ -x $dest/$bin ]]; then
        log "$bin $version: cached"
        link_binary "$bin" "$dest/$bin"
        return
    fi
    log "building $bin $version (cold build takes minutes)..."
    start=$(date +%s)
    LOG_FILE=$LOG_DIR/$bin-$version.log
    : >"$LOG_FILE"
    BUILD_TMP=$(mktemp -d "$STORE/.build-$bin-$version.XXXXXX")
    mkdir -p "$BUILD_TMP/out"
    "build_$bin" "$BUILD_TMP/out/$bin"
    rm -rf "$dest" # a directory without the binary is a leftover
    mv -T "$BUILD_TMP/out" "$dest"
    cleanup
    BUILD_TMP=""
    link_binary "$bin" "$dest/$bin"
    log "$bin $version: built in $(since "$start") ($(du -sh "$dest/$bin" | cut -f1)), log: $LOG_FILE"
}

# build_<binary> OUT: build the binary to OUT and verify it.

build_pulumi() {
    check_wrapper pulumi github.com/pulumi/pulumi/pkg/v3 "$PULUMI_VERSION"
    go_build pulumi github.com/pulumi/pulumi/pkg/v3/cmd/pulumi "$1" \
        "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION"
    PULUMI_HOME=$BUILD_TMP/pulumi-home PULUMI_SKIP_UPDATE_CHECK=1 \
        verify "$PULUMI_VERSION" "$1" version
}

build_pulumi-resource-kubernetes() {
    local version=${PULUMI_KUBERNETES_VERSION#v}
    check_wrapper pulumi-resource-kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4 \
        "$PULUMI_KUBERNETES_PROVIDER_MODULE"
    go_build pulumi-resource-kubernetes \
        github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes "$1" \
        "-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$version"
    # The plugin has no --version flag: ask it for its schema through the
    # engine (which also proves the embedded schema is there).
    PULUMI_HOME=$BUILD_TMP/pulumi-home PULUMI_SKIP_UPDATE_CHECK=1 \
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true \
        verify "\"version\": \"$version\"" \
        "$STORE/pulumi-$PULUMI_VERSION/pulumi" package get-schema "$1"
}

kubernetes_ldflags() {
    local v=${KUBERNETES_VERSION#v} pkg ldflags=""
    # What upstream's hack/lib/version.sh stamps, minus the (unknown) commit.
    for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
        ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=${v%%.*}"
        ldflags+=" -X $pkg.gitMinor=$(cut -d. -f2 <<<"$v") -X $pkg.gitCommit=unknown"
        ldflags+=" -X $pkg.gitTreeState=clean"
    done
    printf '%s' "$ldflags"
}

build_kubernetes_binary() {
    local out=$1
    check_wrapper kubernetes k8s.io/kubernetes "$KUBERNETES_VERSION"
    go_build kubernetes "k8s.io/kubernetes/cmd/$(basename "$out")" "$out" "$(kubernetes_ldflags)"
}

build_kube-apiserver() {
    build_kubernetes_binary "$1"
    verify "Kubernetes $KUBERNETES_VERSION" "$1" --version
}

build_kube-controller-manager() {
    build_kubernetes_binary "$1"
    verify "Kubernetes $KUBERNETES_VERSION" "$1" --version
}

build_kubectl() {
    build_kubernetes_binary "$1"
    verify "Client Version: $KUBERNETES_VERSION" "$1" version --client
}

build_etcd() {
    check_wrapper etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
    # The version string is a constant in go.etcd.io/etcd/api/v3/version;
    # only the commit is stamped by upstream's build script, and it is unknown here.
    go_build etcd go.etcd.io/etcd/server/v3 "$1" "-X go.etcd.io/etcd/api/v3/version.GitSHA=unknown"
    verify "etcd Version: ${ETCD_VERSION#v}" "$1" --version
}

# squid and redis-server come from Debian: install what is missing, build and link nothing.
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
}

usage() {
    sed -n '2,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
    printf '\nbinaries: %s\n' "${ALL_BINARIES[*]}"
}

main() {
    local -a wanted=()
    local arg bin start
    for arg in "$@"; do
        case $arg in
        --bin-dir)
            printf '%s\n' "$BIN_DIR"
            return
            ;;
        --regen)
            mkdir -p "$LOG_DIR"
            regen_all
            return
            ;;
        -h | --help)
            usage
            return
            ;;
        -*) die "unknown option $arg (see --help)" ;;
        *)
            [[ " ${ALL_BINARIES[*]} " == *" $arg "* ]] || die "unknown binary $arg (see --help)"
            wanted+=("$arg")
            ;;
        esac
    done
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
    for bin in "${ALL_BINARIES[@]}"; do
        [[ " ${wanted[*]} " == *" $bin "* ]] || continue
        case $bin in
        squid) ensure_debian_packages ;;
        etcd) ensure_binary etcd "$ETCD_VERSION" ;;
        pulumi) ensure_binary pulumi "$PULUMI_VERSION" ;;
        pulumi-resource-kubernetes)
            ensure_binary pulumi-resource-kubernetes "$PULUMI_KUBERNETES_VERSION"
            ;;
        kube-*) ensure_binary "$bin" "$KUBERNETES_VERSION" ;;
        kubectl) ensure_binary kubectl "$KUBERNETES_VERSION" ;;
        esac
    done
    log "toolchain ready in $(since "$start"); bin dir: $BIN_DIR"
}

main "$@"; exit # one line: edits to this file cannot affect a running build
