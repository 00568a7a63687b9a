#!/usr/bin/env bash
# Builds the dev cluster's container images from Debian's packages (and the
# operator's from PyPI and the toolchain): nothing is pulled from an image
# registry. See docs/development.md.
#
#   tools/images.sh [IMAGE...]   build what is missing (all by default)
#   tools/images.sh --dir        print the directory of the image archives; no build
#
# Images: squid (Debian's squid package on a Debian rootfs made by mmdebstrap),
# redis (Debian's redis-server, for deploy/components/trial-redis), pause (tools/images/pause.c, static), operator (deploy/image.env: Debian's
# python3 and tini, a venv with this repository's packages and their locked
# dependencies, the pulumi CLI and kubernetes plugin from tools/build.sh, so
# it needs those built first). Each becomes an OCI image with umoci, then a
# docker-archive tarball with skopeo, which `ctr images import` reads:
#
#   $CACHE/images/<image>-<recipe>.tar   the archive
#   $CACHE/images/<image>.tar            symlink to the current one
#   $CACHE/images/<image>.ref            the image's reference (its local name)
#   $CACHE/images/pause.bin              the pause binary itself (the node namespace's init)
#
# <recipe> hashes this script, the pause source and the Debian package
# versions the image is made of, so a new squid in Debian is a new image; for
# the operator also deploy/image.env, its hook, the Python sources, the
# constraints and the pulumi builds (their cache paths name version and
# recipe). An archive already there is never rebuilt: delete it to force a
# rebuild.

set -euo pipefail

TOOLS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$TOOLS_DIR")
CACHE_ROOT=${EGRESS_PROXIES_CACHE:-$HOME/.cache/egress-proxies}
IMAGE_DIR=$CACHE_ROOT/images
LOG_DIR=$CACHE_ROOT/logs
ALL_IMAGES=(squid redis pause operator)
# The image builders, from Debian; installed when missing.
BUILDER_PACKAGES="mmdebstrap umoci skopeo gcc libc6-dev"
# The Debian release and archives the squid image's rootfs comes from: the
# same ones this machine's apt uses.
SUITE=bookworm
SOURCES=(
    "deb http://deb.debian.org/debian $SUITE main"
    "deb http://deb.debian.org/debian $SUITE-updates main"
    "deb http://deb.debian.org/debian-security $SUITE-security main"
)
SQUID_PACKAGES=squid,ca-certificates
# The squid image runs as Debian's `proxy` user, as the product's pods do.
SQUID_USER=13:13
REDIS_PACKAGES=redis-server
# The trial Redis runs as 999 (deploy/components/trial-redis sets it too).
REDIS_USER=999:999
PAUSE_USER=65535:65535
# The operator image's contents, shared with deploy/Dockerfile.
IMAGE_SPEC=$REPO_DIR/deploy/image.env
# shellcheck source-path=SCRIPTDIR source=../deploy/image.env
. "$IMAGE_SPEC"
# Left out of the sources the operator image installs (and its recipe hashes),
# as deploy/Dockerfile.dockerignore leaves them out: caches a checkout accumulates.
SOURCE_EXCLUDES=(--exclude=__pycache__ --exclude='*.egg-info' --exclude=build)

LOG_FILE=""
WORK=""

log() { printf '[images] %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
    if [[ -n $WORK ]]; then
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

run() {
    printf '+ [%s] %s\n' "$(date +%T)" "$*" >>"$LOG_FILE"
    if ! "$@" >>"$LOG_FILE" 2>&1; then
        log "FAILED: $*"
        log "last lines of $LOG_FILE:"
        tail -n 30 "$LOG_FILE" | sed 's/^/    /' >&2
        exit 1
    fi
}

ensure_builders() {
    local pkg
    local -a missing=()
    for pkg in $BUILDER_PACKAGES; do
        dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) && return
    ((EUID == 0)) || die "installing ${missing[*]} needs root (apt-get)"
    log "installing the image builders: ${missing[*]} (apt-get)..."
    LOG_FILE=$LOG_DIR/images-apt.log
    : >"$LOG_FILE"
    run apt-get update
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
}

# Every recipe names the versions apt would install, which apt knows only from
# its package lists. A machine may lose them (seen here: the host's lists gone
# after image builds): fetch them again rather than fail, when root may; then
# read every version once, before any build runs.
declare -A VERSIONS=()
ensure_package_lists() {
    local pkg version
    for pkg in ${SQUID_PACKAGES//,/ } redis-server $IMAGE_PACKAGES; do
        version=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
        [[ -n $version && $version != "(none)" ]] || break
    done
    [[ -z $version || $version == "(none)" ]] || return 0
    ((EUID == 0)) || die "apt has no version of $pkg (no package lists?): run apt-get update"
    log "apt has no version of $pkg (no package lists): apt-get update..."
    LOG_FILE=$LOG_DIR/images-apt.log
    : >"$LOG_FILE"
    run apt-get update
}

pin_versions() {
    local pkg
    for pkg in ${SQUID_PACKAGES//,/ } redis-server $IMAGE_PACKAGES; do
        VERSIONS[$pkg]=$(candidate "$pkg")
    done
}

# The version apt would install of a Debian package. Without apt's package
# lists there is none, and a recipe hashed without versions would be wrong.
candidate() {
    local version
    if [[ -n ${VERSIONS[$1]:-} ]]; then
        printf '%s\n' "${VERSIONS[$1]}"
        return
    fi
    version=$(apt-cache policy "$1" | awk '/Candidate:/ {print $2}')
    [[ -n $version && $version != "(none)" ]] ||
        die "apt has no version of $1 (no package lists?): run apt-get update"
    printf '%s\n' "$version"
}

# A Debian version as an image tag ([A-Za-z0-9_.-] only).
as_tag() {
    tr '+~:' '---' <<<"$1"
}

# image_ref IMAGE RECIPE_ID
image_ref() {
    case $1 in
    squid) printf 'localhost/egress-proxies/squid:%s' "$(as_tag "$(candidate squid)")" ;;
    redis) printf 'localhost/egress-proxies/redis:%s' "$(as_tag "$(candidate redis-server)")" ;;
    pause) printf 'localhost/egress-proxies/pause:%s' "$2" ;;
    operator) printf 'localhost/egress-proxies/operator:%s-%s' "$(project_version)" "$2" ;;
    esac
}

project_version() {
    sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO_DIR/pyproject.toml" | head -n1
}

# The toolchain's pulumi build of BINARY (its path names version and recipe).
pulumi_build() {
    local link
    link=$(bash "$TOOLS_DIR/build.sh" --bin-dir)/$1
    [[ -x $link ]] || die "the operator image needs $link: run tools/build.sh first"
    readlink -f "$link"
}

# IMAGE_SOURCES as a tar stream, the caches left out: what the image's pip installs.
operator_sources() {
    # shellcheck disable=SC2086 # a list of paths
    tar -C "$REPO_DIR" "${SOURCE_EXCLUDES[@]}" --sort=name --mtime=@0 --owner=0 --group=0 \
        --numeric-owner -cf - $IMAGE_SOURCES
}

recipe_id() {
    {
        cat "${BASH_SOURCE[0]}"
        case $1 in
        squid)
            printf '%s\n' "${SOURCES[@]}" "$SQUID_PACKAGES"
            for pkg in ${SQUID_PACKAGES//,/ }; do printf '%s %s\n' "$pkg" "$(candidate "$pkg")"; done
            ;;
        redis)
            printf '%s\n' "${SOURCES[@]}" "$REDIS_PACKAGES"
            printf '%s %s\n' redis-server "$(candidate redis-server)"
            ;;
        pause) cat "$TOOLS_DIR/images/pause.c" && gcc --version | head -n1 ;;
        operator)
            cat "$IMAGE_SPEC" "$TOOLS_DIR/images/operator-rootfs.sh"
            printf '%s\n' "${SOURCES[@]}"
            for pkg in $IMAGE_PACKAGES; do printf '%s %s\n' "$pkg" "$(candidate "$pkg")"; done
            operator_sources
            pulumi_build pulumi
            pulumi_build pulumi-resource-kubernetes
            ;;
        esac
    } | sha256sum | cut -c1-12
}

# make_image NAME REF ROOTFS_FILLER CONFIG_FLAG...: an OCI image whose one
# layer is what ROOTFS_FILLER puts in the directory it is given, then the
# docker-archive of it.
make_image() {
    local name=$1 ref=$2 filler=$3 out=$4
    shift 4
    run umoci init --layout "$WORK/oci"
    run umoci new --image "$WORK/oci:$name"
    run umoci unpack --image "$WORK/oci:$name" "$WORK/bundle"
    rmdir "$WORK/bundle/rootfs"
    "$filler" "$WORK/bundle/rootfs"
    run umoci repack --image "$WORK/oci:$name" "$WORK/bundle"
    run umoci config --image "$WORK/oci:$name" --author=egress-proxies "$@"
    run skopeo copy --quiet "oci:$WORK/oci:$name" "docker-archive:$out.partial:$ref"
    mv "$out.partial" "$out"
}

# shellcheck disable=SC2317 # invoked through make_image
fill_squid() {
    run mmdebstrap --variant=essential --include="$SQUID_PACKAGES" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        "$SUITE" "$1" "${SOURCES[@]}"
    # apt's lists and caches are not part of the image.
    rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*
}

# shellcheck disable=SC2317 # invoked through make_image
fill_redis() {
    run mmdebstrap --variant=essential --include="$REDIS_PACKAGES" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        "$SUITE" "$1" "${SOURCES[@]}"
    rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*
}

# shellcheck disable=SC2317 # invoked through make_image
fill_operator() {
    mkdir "$WORK/src"
    operator_sources | tar -C "$WORK/src" -xf -
    run env IMAGE_SPEC="$IMAGE_SPEC" OPERATOR_SOURCES="$WORK/src" \
        PULUMI_CLI="$(pulumi_build pulumi)" \
        PULUMI_PLUGIN_KUBERNETES="$(pulumi_build pulumi-resource-kubernetes)" \
        mmdebstrap --variant=essential --include="${IMAGE_PACKAGES// /,}" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook="bash '$TOOLS_DIR/images/operator-rootfs.sh' \"\$1\"" \
        "$SUITE" "$1" "${SOURCES[@]}"
    rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*
}

# The operator image's config flags, from deploy/image.env.
operator_config() {
    local word
    printf '%s\n' --config.user="$IMAGE_USER"
    for word in $IMAGE_ENTRYPOINT; do printf '%s\n' --config.entrypoint="$word"; done
    for word in $IMAGE_CMD; do printf '%s\n' --config.cmd="$word"; done
    for word in $IMAGE_ENV; do printf '%s\n' --config.env="$word"; done
    for word in $IMAGE_PORTS; do printf '%s\n' --config.exposedports="$word/tcp"; done
}

# shellcheck disable=SC2317 # invoked through make_image
fill_pause() {
    mkdir -p "$1"
    run gcc -static -Os -s -o "$1/pause" "$TOOLS_DIR/images/pause.c"
    # The same binary is the init of the dev cluster's node namespaces.
    install -m 0755 "$1/pause" "$IMAGE_DIR/pause.bin.new"
    mv -f "$IMAGE_DIR/pause.bin.new" "$IMAGE_DIR/pause-$(recipe_id pause).bin"
}

ensure_image() {
    local name=$1 id ref out start
    id=$(recipe_id "$name")
    ref=$(image_ref "$name" "$id")
    out=$IMAGE_DIR/$name-$id.tar
    if [[ -s $out ]]; then
        log "$ref: cached"
    else
        log "building $ref..."
        start=$(date +%s)
        LOG_FILE=$LOG_DIR/image-$name-$id.log
        : >"$LOG_FILE"
        WORK=$(mktemp -d "$IMAGE_DIR/.build-$name.XXXXXX")
        case $name in
        squid)
            make_image squid "$ref" fill_squid "$out" --config.user="$SQUID_USER" \
                --config.entrypoint=/usr/sbin/squid --config.cmd=-NYC \
                --config.cmd=-f --config.cmd=/etc/squid/squid.conf \
                --config.exposedports=3128/tcp
            ;;
        redis)
            make_image redis "$ref" fill_redis "$out" --config.user="$REDIS_USER" \
                --config.cmd=redis-server --config.exposedports=6379/tcp
            ;;
        pause)
            make_image pause "$ref" fill_pause "$out" --config.user="$PAUSE_USER" \
                --config.entrypoint=/pause
            ;;
        operator)
            local -a config
            mapfile -t config < <(operator_config)
            make_image operator "$ref" fill_operator "$out" "${config[@]}"
            ;;
        esac
        rm -rf "$WORK"
        WORK=""
        log "$ref: built in $(($(date +%s) - start))s ($(du -h "$out" | cut -f1)), log: $LOG_FILE"
    fi
    ln -sfn "$out" "$IMAGE_DIR/$name.tar"
    if [[ $name == pause ]]; then
        ln -sfn "$IMAGE_DIR/pause-$id.bin" "$IMAGE_DIR/pause.bin"
    fi
    printf '%s\n' "$ref" >"$IMAGE_DIR/$name.ref.new"
    mv -f "$IMAGE_DIR/$name.ref.new" "$IMAGE_DIR/$name.ref"
}

main() {
    local arg
    local -a wanted=()
    for arg in "$@"; do
        case $arg in
        --dir)
            printf '%s\n' "$IMAGE_DIR"
            return
            ;;
        -h | --help)
            sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
            return
            ;;
        -*) die "unknown option $arg (see --help)" ;;
        *)
            [[ " ${ALL_IMAGES[*]} " == *" $arg "* ]] || die "unknown image $arg (images: ${ALL_IMAGES[*]})"
            wanted+=("$arg")
            ;;
        esac
    done
    ((${#wanted[@]} > 0)) || wanted=("${ALL_IMAGES[@]}")
    mkdir -p "$IMAGE_DIR" "$LOG_DIR"
    exec 9>"$IMAGE_DIR/.lock"
    if ! flock -n 9; then
        log "waiting for another tools/images.sh to finish..."
        flock 9
    fi
    rm -rf "$IMAGE_DIR"/.build-*
    ensure_builders
    ensure_package_lists
    pin_versions
    for arg in "${wanted[@]}"; do
        ensure_image "$arg"
    done
}

main "$@"; exit # one line: edits to this file cannot affect a running build
