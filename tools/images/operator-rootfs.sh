#!/usr/bin/env bash
# The operator image's customize hook, run by mmdebstrap (tools/images.sh)
# with the rootfs as $1, after the Debian packages of deploy/image.env are
# installed and while the rootfs has /proc, /sys and /dev mounted:
#
#   1. the venv, by deploy/Dockerfile's own commands: `python3 -m venv`, then
#      `pip install -c constraints.txt . ./clients/python` from a copy of the
#      repository's sources at /src (pip, inside the rootfs so that it picks
#      the wheels of the image's Python, downloads the locked dependencies
#      from PyPI with this machine's PIP_* settings and CA bundle: a proxy
#      that re-signs TLS is trusted here as it is by the host's pip);
#   2. the pulumi CLI and the kubernetes plugin from the toolchain cache;
#   3. `egress-proxies --help` and `pulumi version` as the image's user, with
#      the image's environment: a broken image is never cached.
#
# Inputs (environment): IMAGE_SPEC (deploy/image.env), OPERATOR_SOURCES (a
# copy of its IMAGE_SOURCES), PULUMI_CLI, PULUMI_PLUGIN_KUBERNETES.

set -euo pipefail

root=$1
# shellcheck source-path=SCRIPTDIR source=../../deploy/image.env
. "$IMAGE_SPEC"

cp -a "$OPERATOR_SOURCES" "$root/src"
install -m 0644 "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$root/src/.host-ca.crt"
chroot "$root" /usr/bin/python3 -m venv "$IMAGE_VENV"
# requests prefers REQUESTS_CA_BUNDLE to pip's --cert, and the host's value
# names a path that is the image's own bundle inside the rootfs.
chroot "$root" /usr/bin/env -C /src PIP_CERT=/src/.host-ca.crt \
    REQUESTS_CA_BUNDLE=/src/.host-ca.crt SSL_CERT_FILE=/src/.host-ca.crt \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
    "$IMAGE_VENV/bin/pip" install -c constraints.txt . ./clients/python
rm -rf "$root/src" "$root/root/.cache"

install -D -m 0755 "$PULUMI_CLI" "$root$IMAGE_PULUMI_ROOT/bin/pulumi"
install -D -m 0755 "$PULUMI_PLUGIN_KUBERNETES" \
    "$root$IMAGE_PLUGINS_DIR/kubernetes/pulumi-resource-kubernetes"

# shellcheck disable=SC2086 # IMAGE_ENV is a list of NAME=value words
as_image_user() {
    chroot --userspec="$IMAGE_USER" "$root" /usr/bin/env -i $IMAGE_ENV HOME=/tmp "$@"
}
as_image_user egress-proxies --help >/dev/null
as_image_user pulumi version
find "$root/tmp" -mindepth 1 -delete
# mmdebstrap copied in the build machine's name and resolver; the runtime
# mounts its own over these.
: >"$root/etc/resolv.conf"
: >"$root/etc/hostname"
