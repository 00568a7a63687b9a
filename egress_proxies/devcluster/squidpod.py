"""Turn a Squid pod's spec into a local squid invocation (pure: no I/O).

The loopback kubelet runs a pod's Squid as a host process, so the pod's
files are laid out under a per-pod root directory the way a real kubelet
lays out its volumes (ownership, modes, `fsGroup`, `subPath`), beside the
writable directories of the squid image itself. The pod's squid.conf is
rewritten in four ways only: `http_port` binds the pod's own 127.x.y.z
address, and outgoing connections leave from it (`tcp_outgoing_address`);
paths under the pod's mounts and the image's directories point into the
pod root (squid's compiled-in defaults for the pid file and logs are
written out, so they land there too); and a few process-level directives
that only tune the host process (`workers`, `pinger_enable`,
`shutdown_lifetime`) are replaced.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from egress_proxies.errors import EgressProxiesError

DEFAULT_CONFIG_PATH = "/etc/squid/squid.conf"
ROOT = 0
# The squid image's own user: `proxy`, uid/gid 13 on Debian and Ubuntu images.
IMAGE_USER = 13
DEFAULT_VOLUME_MODE = 0o644
EMPTY_DIR_MODE = 0o777
_FS_GROUP_READ = 0o440  # a real kubelet adds group read to every file of a read-only volume
_FS_GROUP_DIR = 0o2000 | 0o550  # ... and setgid + group read/exec to its directories

# Directories the squid image ships, with their owner and mode (Debian's squid package).
IMAGE_DIRECTORIES: dict[str, tuple[int, int]] = {
    "/run": (ROOT, 0o755),
    "/var/run": (ROOT, 0o755),
    "/var/log/squid": (IMAGE_USER, 0o755),
    "/var/spool/squid": (IMAGE_USER, 0o755),
    "/var/cache/squid": (IMAGE_USER, 0o755),
}

# squid's compiled-in defaults (Debian's configure flags) for the files it writes.
_DEFAULT_FILES = {
    "pid_filename": "/run/squid.pid",
    "cache_log": "/var/log/squid/cache.log",
    "access_log": "daemon:/var/log/squid/access.log squid",
}

# Host-process tuning the kubelet replaces; none of them changes what a test observes.
_REPLACED_DIRECTIVES = frozenset({"workers", "pinger_enable", "shutdown_lifetime"})
_LOG_MODULES = ("stdio:", "daemon:")
_NOT_MAPPED = ("/dev/", "/proc/")

# Waiting reasons of a container that did not start.
ERR_IMAGE_PULL = "ErrImagePull"
CONFIG_ERROR = "CreateContainerConfigError"


class PodRejectedError(ValueError, EgressProxiesError):
    """The pod cannot run as asked; `reason` is a pod status reason.

    `waiting` is true where a real kubelet keeps the pod Pending with the
    container waiting for that reason (an image it cannot pull, a missing
    key), false where it fails the pod.
    """

    def __init__(self, reason: str, message: str, *, waiting: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.waiting = waiting


@dataclass(frozen=True)
class VolumeSource:
    """Where a volume's files come from: a ConfigMap or Secret by name, or an emptyDir."""

    kind: str  # "configMap", "secret" or "emptyDir"
    name: str = ""
    items: tuple[tuple[str, str, int | None], ...] = ()  # (key, path, mode); empty = every key
    default_mode: int = DEFAULT_VOLUME_MODE


@dataclass(frozen=True)
class Mount:
    """One volumeMount: its volume, subPath ("" for the whole volume) and readOnly flag."""

    source: VolumeSource
    sub_path: str = ""
    read_only: bool = False


@dataclass(frozen=True)
class RunAs:
    """The identity the container's process gets, from the pod and container securityContext."""

    uid: int | None = None  # None: the image's user, root for squid images
    gid: int | None = None
    fs_group: int | None = None
    supplemental_groups: tuple[int, ...] = ()
    run_as_non_root: bool = False

    @property
    def groups(self) -> tuple[int, ...]:
        """Supplementary groups: fsGroup first, then supplementalGroups."""
        extra = (self.fs_group,) if self.fs_group is not None else ()
        return tuple(dict.fromkeys(extra + self.supplemental_groups))


@dataclass(frozen=True)
class SquidPodPlan:
    """What the kubelet must fetch, write and run for one pod."""

    container: str
    image: str
    config_path: str
    mounts: dict[str, Mount] = field(default_factory=dict)
    run_as: RunAs = RunAs()
    read_only_root: bool = False
    restart_policy: str = "Always"
    logs_as_termination_message: bool = False


@dataclass(frozen=True)
class PodPath:
    """One directory (content None) or file of the pod's filesystem, as a kubelet lays it out."""

    path: str
    content: bytes | None
    mode: int
    uid: int = ROOT
    gid: int = ROOT


def is_squid_image(image: str) -> bool:
    """True for images whose repository name is squid (ubuntu/squid:6.10, squid, ...)."""
    repository = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return repository.split(":", 1)[0] == "squid"


def plan_pod(pod: Mapping[str, Any]) -> SquidPodPlan:
    """Check that a pod is a single Squid container and list what it needs."""
    spec = pod.get("spec", {})
    containers = spec.get("containers", [])
    if len(containers) != 1:
        raise PodRejectedError(
            "UnsupportedPod", "the loopback kubelet runs pods with exactly one squid container"
        )
    container = containers[0]
    image = container.get("image", "")
    if not is_squid_image(image):
        raise PodRejectedError(
            ERR_IMAGE_PULL,
            f'Failed to pull image "{image}": the loopback kubelet has only squid images '
            "(ubuntu/squid, ...)",
            waiting=True,
        )
    volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
    mounts: dict[str, Mount] = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"])
        if volume is None:
            raise PodRejectedError("InvalidPod", f"volumeMount {mount['name']!r} has no volume")
        source = _volume_source(volume)
        if source is not None:
            mounts[mount["mountPath"]] = Mount(
                source, mount.get("subPath", ""), bool(mount.get("readOnly", False))
            )
    argv = [*container.get("command", []), *container.get("args", [])]
    container_context = container.get("securityContext") or {}
    return SquidPodPlan(
        container=container["name"],
        image=image,
        config_path=_config_path(argv),
        mounts=mounts,
        run_as=_run_as(spec.get("securityContext") or {}, container_context),
        read_only_root=bool(container_context.get("readOnlyRootFilesystem", False)),
        restart_policy=spec.get("restartPolicy", "Always"),
        logs_as_termination_message=(
            container.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        ),
    )


def _run_as(pod_context: Mapping[str, Any], container_context: Mapping[str, Any]) -> RunAs:
    def pick(key: str) -> Any:
        return container_context.get(key, pod_context.get(key))

    run_as = RunAs(
        uid=pick("runAsUser"),
        gid=pick("runAsGroup"),
        fs_group=pod_context.get("fsGroup"),
        supplemental_groups=tuple(pod_context.get("supplementalGroups") or ()),
        run_as_non_root=bool(pick("runAsNonRoot")),
    )
    if run_as.run_as_non_root and not run_as.uid:
        raise PodRejectedError(
            CONFIG_ERROR,
            "container has runAsNonRoot and image will run as root"
            if run_as.uid is None
            else "container's runAsUser breaks non-root policy",
            waiting=True,
        )
    return run_as


def _volume_source(volume: Mapping[str, Any]) -> VolumeSource | None:
    if "emptyDir" in volume:
        return VolumeSource(kind="emptyDir")
    for kind, name_key in (("configMap", "name"), ("secret", "secretName")):
        if kind in volume:
            body = volume[kind]
            items = tuple(
                (item["key"], item["path"], item.get("mode")) for item in body.get("items", [])
            )
            return VolumeSource(
                kind=kind,
                name=body[name_key],
                items=items,
                default_mode=body.get("defaultMode", DEFAULT_VOLUME_MODE),
            )
    return None


def _config_path(argv: list[str]) -> str:
    words = [word for arg in argv for word in shlex.split(arg)]
    for index, word in enumerate(words):
        if word == "-f" and index + 1 < len(words):
            return words[index + 1]
        if word.startswith("-f") and len(word) > 2:
            return word[2:]
    return DEFAULT_CONFIG_PATH


def volume_files(source: VolumeSource, data: Mapping[str, str]) -> dict[str, tuple[bytes, int]]:
    """The files (relative path -> content, mode) a ConfigMap or Secret volume shows."""
    secret = source.kind == "secret"
    decoded = {
        key: base64.b64decode(value) if secret else value.encode() for key, value in data.items()
    }
    if not source.items:
        return {key: (content, source.default_mode) for key, content in decoded.items()}
    files: dict[str, tuple[bytes, int]] = {}
    for key, path, mode in source.items:
        if key not in decoded:
            raise PodRejectedError(
                CONFIG_ERROR,
                f"{source.kind} {source.name!r} has no key {key!r}",
                waiting=True,
            )
        files[path] = (decoded[key], mode if mode is not None else source.default_mode)
    return files


def pod_file_layout(
    plan: SquidPodPlan, volumes: Mapping[str, dict[str, tuple[bytes, int]]]
) -> list[PodPath]:
    """Every directory and file of the pod's filesystem, with a real kubelet's owners and modes.

    ConfigMap and Secret files are root-owned with their mode; with an
    `fsGroup` their group is that group and they gain group read (a real
    kubelet's ownership pass over a read-only volume). emptyDirs are 0777
    directories. The image's own directories keep the image's owners,
    and lose their write bits under `readOnlyRootFilesystem`.
    """
    fs_group = plan.run_as.fs_group
    paths: dict[str, PodPath] = {}
    for directory, (owner, image_mode) in IMAGE_DIRECTORIES.items():
        mode = image_mode & ~0o222 if plan.read_only_root else image_mode
        paths[directory] = PodPath(directory, None, mode, owner, owner)
    for mount_path, mount in sorted(plan.mounts.items()):
        group = fs_group if fs_group is not None else ROOT
        if mount.source.kind == "emptyDir":
            mode = EMPTY_DIR_MODE | (0o2000 if fs_group is not None else 0)
            if mount.read_only:
                mode &= ~0o222
            paths[mount_path] = PodPath(mount_path, None, mode, ROOT, group)
            continue
        files = volumes[mount_path]
        if mount.sub_path:
            if mount.sub_path not in files:
                raise PodRejectedError(
                    CONFIG_ERROR, f"subPath {mount.sub_path!r} is not in its volume", waiting=True
                )
            content, mode = files[mount.sub_path]
            paths[mount_path] = PodPath(mount_path, content, _file_mode(mode, fs_group), 0, group)
            continue
        dir_mode = 0o755 | (_FS_GROUP_DIR if fs_group is not None else 0)
        paths[mount_path] = PodPath(mount_path, None, dir_mode, ROOT, group)
        for relative, (content, mode) in files.items():
            path = str(PurePosixPath(mount_path) / relative)
            paths[path] = PodPath(path, content, _file_mode(mode, fs_group), ROOT, group)
    return [paths[path] for path in sorted(paths)]


def _file_mode(mode: int, fs_group: int | None) -> int:
    return mode | _FS_GROUP_READ if fs_group is not None else mode


def file_content(layout: list[PodPath], path: str) -> bytes | None:
    """The content of one file of a layout, if it is there."""
    return next((entry.content for entry in layout if entry.path == path), None)


def rewrite_config(
    config: str, *, pod_ip: str, pod_root: str, mount_paths: list[str]
) -> tuple[str, list[int]]:
    """Rewrite a pod's squid.conf for a host process; return it and the ports it listens on."""
    lines: list[str] = []
    ports: list[int] = []
    prefixes = sorted([*mount_paths, *IMAGE_DIRECTORIES], key=len, reverse=True)
    seen: set[str] = set()
    for raw in config.splitlines():
        words = raw.split()
        if not words or words[0].startswith("#"):
            lines.append(raw)
            continue
        seen.add(words[0])
        if words[0] in _REPLACED_DIRECTIVES:
            continue
        words = _bind_port(words, pod_ip, ports)
        lines.append(" ".join(_map_path(word, prefixes, pod_root) for word in words))
    if not ports:
        raise PodRejectedError("InvalidConfig", "squid.conf has no http_port")
    lines += ["", "# Added by the loopback kubelet: squid's defaults, inside the pod root."]
    for directive, default in _DEFAULT_FILES.items():
        if directive not in seen:
            mapped = " ".join(_map_path(word, prefixes, pod_root) for word in default.split())
            lines.append(f"{directive} {mapped}")
    lines += ["pinger_enable off", "shutdown_lifetime 1 seconds"]
    if "tcp_outgoing_address" not in seen:
        # As from a real pod: the origin sees the pod's own address, not the host's.
        lines.append(f"tcp_outgoing_address {pod_ip}")
    return "\n".join(lines) + "\n", ports


def _bind_port(words: list[str], pod_ip: str, ports: list[int]) -> list[str]:
    """An http_port line bound to the pod's address (its port added to `ports`)."""
    if words[0] == "http_port":
        if len(words) < 2:
            raise PodRejectedError("InvalidConfig", "http_port without a port")
        port = _port_of(words[1])
        ports.append(port)
        return [words[0], f"{pod_ip}:{port}", *words[2:]]
    if words[0] == "https_port":
        raise PodRejectedError(
            "InvalidConfig", "https_port is not supported by the loopback kubelet"
        )
    return words


def _port_of(address: str) -> int:
    text = address.rsplit(":", 1)[-1] if ":" in address else address
    try:
        port = int(text)
    except ValueError:
        raise PodRejectedError(
            "InvalidConfig", f"http_port {address!r} has no numeric port"
        ) from None
    if not 0 < port < 65536:
        raise PodRejectedError("InvalidConfig", f"http_port {port} is out of range")
    return port


def _map_path(word: str, prefixes: list[str], pod_root: str) -> str:
    module = next((m for m in _LOG_MODULES if word.startswith(m)), "")
    path = word[len(module) :]
    if not path.startswith("/") or path.startswith(_NOT_MAPPED):
        return word
    for prefix in prefixes:
        if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
            return module + pod_root + path
    return word
