"""Turn a Squid pod's spec into a local squid invocation (pure: no I/O).

The loopback kubelet runs a pod's Squid as a host process, so the pod's
files (ConfigMap and Secret volumes) are laid out under a per-pod root
directory, and the pod's squid.conf is rewritten in three ways only:
`http_port` binds the pod's own 127.x.y.z address; paths under the pod's
mounts point into the pod root; and the process-level directives that
would touch host paths (pid file, logs, cache dirs, effective user) are
replaced by per-pod ones.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

DEFAULT_CONFIG_PATH = "/etc/squid/squid.conf"

# Directives whose host-level effect the kubelet replaces with a per-pod value.
_REPLACED_DIRECTIVES = frozenset(
    {
        "pid_filename",
        "cache_log",
        "access_log",
        "cache_store_log",
        "coredump_dir",
        "cache_effective_user",
        "cache_effective_group",
        "cache_dir",
        "pinger_enable",
        "shutdown_lifetime",
        "workers",
    }
)


class PodRejectedError(ValueError):
    """The pod cannot run on the loopback kubelet; `reason` is a pod status reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class VolumeSource:
    """Where a volume's files come from: a ConfigMap or Secret by name."""

    kind: str  # "configMap" or "secret"
    name: str
    items: tuple[tuple[str, str], ...] = ()  # (key, path) pairs; empty = every key


@dataclass(frozen=True)
class SquidPodPlan:
    """What the kubelet must fetch, write and run for one pod."""

    container: str
    image: str
    config_path: str
    mounts: dict[str, tuple[VolumeSource, str]] = field(default_factory=dict)
    # mountPath -> (volume source, subPath or "")


def is_squid_image(image: str) -> bool:
    """True for images whose repository name is squid (ubuntu/squid:6.10, squid, ...)."""
    repository = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return repository.split(":", 1)[0] == "squid"


def plan_pod(pod: Mapping[str, Any]) -> SquidPodPlan:
    """Check that a pod is a single Squid container and list the files it needs."""
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
            "UnsupportedImage",
            f"the loopback kubelet runs only squid images (ubuntu/squid, ...); got {image!r}",
        )
    volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
    mounts: dict[str, tuple[VolumeSource, str]] = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"])
        if volume is None:
            raise PodRejectedError("InvalidPod", f"volumeMount {mount['name']!r} has no volume")
        source = _volume_source(volume)
        if source is not None:
            mounts[mount["mountPath"]] = (source, mount.get("subPath", ""))
    argv = [*container.get("command", []), *container.get("args", [])]
    return SquidPodPlan(
        container=container["name"],
        image=image,
        config_path=_config_path(argv),
        mounts=mounts,
    )


def _volume_source(volume: Mapping[str, Any]) -> VolumeSource | None:
    for kind, name_key in (("configMap", "name"), ("secret", "secretName")):
        if kind in volume:
            body = volume[kind]
            items = tuple((item["key"], item["path"]) for item in body.get("items", []))
            return VolumeSource(kind=kind, name=body[name_key], items=items)
    return None


def _config_path(argv: list[str]) -> str:
    words = [word for arg in argv for word in shlex.split(arg)]
    for index, word in enumerate(words):
        if word == "-f" and index + 1 < len(words):
            return words[index + 1]
        if word.startswith("-f") and len(word) > 2:
            return word[2:]
    return DEFAULT_CONFIG_PATH


def volume_files(
    source: VolumeSource, data: Mapping[str, str], *, secret: bool
) -> dict[str, bytes]:
    """The files (relative path -> content) a ConfigMap or Secret volume shows."""
    decoded = {
        key: base64.b64decode(value) if secret else value.encode() for key, value in data.items()
    }
    if not source.items:
        return decoded
    files: dict[str, bytes] = {}
    for key, path in source.items:
        if key not in decoded:
            raise PodRejectedError(
                "CreateContainerConfigError", f"{source.kind} {source.name!r} has no key {key!r}"
            )
        files[path] = decoded[key]
    return files


def pod_file_layout(
    plan: SquidPodPlan, volumes: Mapping[str, dict[str, bytes]]
) -> dict[str, bytes]:
    """Absolute in-pod paths -> content, from each mount's volume files."""
    layout: dict[str, bytes] = {}
    for mount_path, (_, sub_path) in plan.mounts.items():
        files = volumes[mount_path]
        if sub_path:
            if sub_path not in files:
                raise PodRejectedError(
                    "CreateContainerConfigError", f"subPath {sub_path!r} is not in its volume"
                )
            layout[mount_path] = files[sub_path]
        else:
            for relative, content in files.items():
                layout[str(PurePosixPath(mount_path) / relative)] = content
    return layout


def rewrite_config(
    config: str, *, pod_ip: str, pod_root: str, run_dir: str, mount_paths: list[str]
) -> tuple[str, list[int]]:
    """Rewrite a pod's squid.conf for a host process; return it and the ports it listens on."""
    lines: list[str] = []
    ports: list[int] = []
    prefixes = sorted(mount_paths, key=len, reverse=True)
    for raw in config.splitlines():
        words = raw.split()
        if not words or words[0].startswith("#"):
            lines.append(raw)
            continue
        directive = words[0]
        if directive in _REPLACED_DIRECTIVES:
            continue
        if directive == "http_port":
            if len(words) < 2:
                raise PodRejectedError("InvalidConfig", "http_port without a port")
            port = _port_of(words[1])
            ports.append(port)
            words[1] = f"{pod_ip}:{port}"
        elif directive == "https_port":
            raise PodRejectedError(
                "InvalidConfig", "https_port is not supported by the loopback kubelet"
            )
        lines.append(" ".join(_map_path(word, prefixes, pod_root) for word in words))
    if not ports:
        raise PodRejectedError("InvalidConfig", "squid.conf has no http_port")
    lines += [
        "",
        "# Added by the loopback kubelet: per-pod process files.",
        f"pid_filename {run_dir}/squid.pid",
        f"cache_log stdio:{run_dir}/cache.log",
        f"access_log stdio:{run_dir}/access.log",
        f"coredump_dir {run_dir}",
        "pinger_enable off",
        "shutdown_lifetime 1 seconds",
    ]
    return "\n".join(lines) + "\n", ports


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
    for prefix in prefixes:
        if word == prefix or word.startswith(prefix.rstrip("/") + "/"):
            return pod_root + word
    return word
