"""How the loopback kubelet reads a Squid pod and rewrites its configuration."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from egress_proxies.devcluster.squidpod import (
    IMAGE_USER,
    Mount,
    PodPath,
    PodRejectedError,
    RunAs,
    VolumeSource,
    is_squid_image,
    plan_pod,
    pod_file_layout,
    rewrite_config,
    volume_files,
)


def squid_pod(pod_spec: dict[str, Any] | None = None, **container: Any) -> dict[str, Any]:
    base = {
        "name": "squid",
        "image": "ubuntu/squid:6.10-24.10_beta",
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/squid/squid.conf", "subPath": "squid.conf"},
            {"name": "auth", "mountPath": "/etc/squid/auth"},
        ],
    }
    base.update(container)
    return {
        "metadata": {"name": "p", "namespace": "n", "uid": "u"},
        "spec": {
            "containers": [base],
            "volumes": [
                {"name": "config", "configMap": {"name": "squid-config"}},
                {"name": "auth", "secret": {"secretName": "squid-auth"}},
                {"name": "token", "projected": {"sources": []}},
            ],
            **(pod_spec or {}),
        },
    }


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("ubuntu/squid:6.10-24.10_beta", True),
        ("squid", True),
        ("registry.example.com/team/squid@sha256:abc", True),
        ("nginx:1.27", False),
        ("ubuntu/squidguard:1", False),
    ],
)
def test_only_squid_images_are_runnable(image: str, expected: bool) -> None:
    assert is_squid_image(image) is expected


def test_plan_lists_configmap_and_secret_mounts() -> None:
    plan = plan_pod(squid_pod())
    assert plan.config_path == "/etc/squid/squid.conf"
    assert plan.mounts == {
        "/etc/squid/squid.conf": Mount(VolumeSource("configMap", "squid-config"), "squid.conf"),
        "/etc/squid/auth": Mount(VolumeSource("secret", "squid-auth")),
    }
    assert plan.run_as == RunAs()  # the image's user: root
    assert plan.restart_policy == "Always"


def test_config_path_comes_from_args() -> None:
    plan = plan_pod(squid_pod(args=["-N", "-f", "/config/custom.conf"]))
    assert plan.config_path == "/config/custom.conf"


def test_an_image_it_cannot_run_waits_like_an_unpullable_image() -> None:
    with pytest.raises(PodRejectedError) as rejected:
        plan_pod(squid_pod(image="nginx:1.27"))
    assert rejected.value.reason == "ErrImagePull"
    assert rejected.value.waiting
    assert "nginx:1.27" in rejected.value.message


def test_mount_without_volume_is_rejected() -> None:
    pod = squid_pod(volumeMounts=[{"name": "missing", "mountPath": "/x"}])
    with pytest.raises(PodRejectedError, match="no volume"):
        plan_pod(pod)


def test_the_container_identity_comes_from_both_security_contexts() -> None:
    pod = squid_pod(
        {"securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000}},
        securityContext={"runAsUser": 13, "readOnlyRootFilesystem": True},
    )
    plan = plan_pod(pod)
    assert plan.run_as == RunAs(uid=13, gid=1000, fs_group=2000)
    assert plan.run_as.groups == (2000,)
    assert plan.read_only_root


def test_run_as_non_root_without_a_user_cannot_start_a_root_image() -> None:
    with pytest.raises(PodRejectedError) as rejected:
        plan_pod(squid_pod({"securityContext": {"runAsNonRoot": True}}))
    assert rejected.value.reason == "CreateContainerConfigError"
    assert rejected.value.waiting
    assert "runAsNonRoot" in rejected.value.message


def layout_of(pod: dict[str, Any], passwd_mode: int | None = None) -> dict[str, PodPath]:
    plan = plan_pod(pod)
    config = volume_files(plan.mounts["/etc/squid/squid.conf"].source, {"squid.conf": "x"})
    auth = volume_files(
        plan.mounts["/etc/squid/auth"].source,
        {"passwd": base64.b64encode(b"user:hash").decode()},
    )
    layout = pod_file_layout(plan, {"/etc/squid/squid.conf": config, "/etc/squid/auth": auth})
    return {entry.path: entry for entry in layout}


def secret_mode(mode: int) -> dict[str, Any]:
    return {
        "volumes": [
            {"name": "config", "configMap": {"name": "squid-config"}},
            {"name": "auth", "secret": {"secretName": "squid-auth", "defaultMode": mode}},
        ]
    }


def test_volume_files_are_root_owned_with_their_default_mode() -> None:
    paths = layout_of(squid_pod())
    assert paths["/etc/squid/squid.conf"] == PodPath("/etc/squid/squid.conf", b"x", 0o644)
    assert paths["/etc/squid/auth/passwd"] == PodPath("/etc/squid/auth/passwd", b"user:hash", 0o644)


def test_without_fs_group_a_0440_secret_is_readable_by_root_only() -> None:
    passwd = layout_of(squid_pod(secret_mode(0o440)))["/etc/squid/auth/passwd"]
    assert (passwd.uid, passwd.gid, passwd.mode) == (0, 0, 0o440)


def test_fs_group_owns_volume_files_and_adds_group_read() -> None:
    pod = squid_pod({**secret_mode(0o400), "securityContext": {"fsGroup": 13}})
    paths = layout_of(pod)
    passwd = paths["/etc/squid/auth/passwd"]
    assert (passwd.uid, passwd.gid, passwd.mode) == (0, 13, 0o440)
    directory = paths["/etc/squid/auth"]
    assert (directory.gid, directory.mode & 0o2000) == (13, 0o2000)


def test_item_modes_override_the_default_mode() -> None:
    source = VolumeSource("secret", "s", items=(("passwd", "pw", 0o400),), default_mode=0o644)
    files = volume_files(source, {"passwd": base64.b64encode(b"x").decode()})
    assert files == {"pw": (b"x", 0o400)}


def test_empty_dirs_are_world_writable_and_read_only_mounts_are_not() -> None:
    pod = squid_pod(
        {
            "volumes": [
                {"name": "config", "configMap": {"name": "squid-config"}},
                {"name": "auth", "secret": {"secretName": "squid-auth"}},
                {"name": "run", "emptyDir": {}},
                {"name": "frozen", "emptyDir": {}},
            ]
        },
        volumeMounts=[
            {"name": "config", "mountPath": "/etc/squid/squid.conf", "subPath": "squid.conf"},
            {"name": "auth", "mountPath": "/etc/squid/auth"},
            {"name": "run", "mountPath": "/var/run/squid"},
            {"name": "frozen", "mountPath": "/frozen", "readOnly": True},
        ],
    )
    paths = layout_of(pod)
    assert paths["/var/run/squid"].mode == 0o777
    assert paths["/frozen"].mode == 0o555


def test_the_image_directories_lose_write_under_a_read_only_root() -> None:
    writable = layout_of(squid_pod())["/var/log/squid"]
    assert (writable.uid, writable.mode) == (IMAGE_USER, 0o755)
    frozen = layout_of(squid_pod(securityContext={"readOnlyRootFilesystem": True}))
    assert frozen["/var/log/squid"].mode == 0o555
    assert frozen["/run"].mode == 0o555


def test_missing_subpath_is_a_config_error() -> None:
    plan = plan_pod(squid_pod())
    with pytest.raises(PodRejectedError) as rejected:
        pod_file_layout(plan, {"/etc/squid/squid.conf": {}, "/etc/squid/auth": {}})
    assert rejected.value.reason == "CreateContainerConfigError"


CONFIG = """\
# a comment
http_port 3128
auth_param basic program /usr/lib/squid/basic_ncsa_auth /etc/squid/auth/passwd
acl users proxy_auth REQUIRED
http_access allow users
http_access deny all
pid_filename /var/run/squid/squid.pid
cache_log /dev/stderr
access_log stdio:/dev/stdout
workers 4
"""


def test_rewrite_binds_the_pod_ip_and_maps_mounted_paths() -> None:
    config, ports = rewrite_config(
        CONFIG,
        pod_ip="127.9.0.2",
        pod_root="/pods/u/root",
        mount_paths=["/etc/squid/squid.conf", "/etc/squid/auth", "/var/run/squid"],
    )
    assert ports == [3128]
    lines = config.splitlines()
    assert "http_port 127.9.0.2:3128" in lines
    assert (
        "auth_param basic program /usr/lib/squid/basic_ncsa_auth /pods/u/root/etc/squid/auth/passwd"
        in lines
    )
    assert "http_access deny all" in lines
    assert "pid_filename /pods/u/root/var/run/squid/squid.pid" in lines
    assert "cache_log /dev/stderr" in lines
    assert "access_log stdio:/dev/stdout" in lines
    assert not any(line.startswith("workers") for line in lines)
    assert "tcp_outgoing_address 127.9.0.2" in lines


def test_rewrite_writes_squids_defaults_into_the_pod_root() -> None:
    config, _ = rewrite_config(
        "http_port 3128\n", pod_ip="127.9.0.2", pod_root="/r", mount_paths=[]
    )
    lines = config.splitlines()
    assert "pid_filename /r/run/squid.pid" in lines
    assert "cache_log /r/var/log/squid/cache.log" in lines
    assert "access_log daemon:/r/var/log/squid/access.log squid" in lines


def test_rewrite_keeps_port_options_and_replaces_any_bind_address() -> None:
    config, ports = rewrite_config(
        "http_port 0.0.0.0:8080 name=main\n",
        pod_ip="127.9.0.3",
        pod_root="/r",
        mount_paths=[],
    )
    assert ports == [8080]
    assert "http_port 127.9.0.3:8080 name=main" in config.splitlines()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("http_access allow all\n", "no http_port"),
        ("http_port proxy\n", "no numeric port"),
        ("http_port 70000\n", "out of range"),
        ("https_port 3129 tls-cert=/x\n", "not supported"),
    ],
)
def test_rewrite_rejects_configs_it_cannot_run(config: str, message: str) -> None:
    with pytest.raises(PodRejectedError, match=message) as rejected:
        rewrite_config(config, pod_ip="127.9.0.4", pod_root="/r", mount_paths=[])
    assert rejected.value.reason == "InvalidConfig"
