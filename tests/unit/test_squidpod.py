"""How the loopback kubelet reads a Squid pod and rewrites its configuration."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from egress_proxies.devcluster.squidpod import (
    PodRejectedError,
    VolumeSource,
    is_squid_image,
    plan_pod,
    pod_file_layout,
    rewrite_config,
    volume_files,
)


def squid_pod(**container: Any) -> dict[str, Any]:
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
        "/etc/squid/squid.conf": (VolumeSource("configMap", "squid-config"), "squid.conf"),
        "/etc/squid/auth": (VolumeSource("secret", "squid-auth"), ""),
    }


def test_config_path_comes_from_args() -> None:
    plan = plan_pod(squid_pod(args=["-N", "-f", "/config/custom.conf"]))
    assert plan.config_path == "/config/custom.conf"


def test_unknown_image_is_rejected_with_a_reason() -> None:
    with pytest.raises(PodRejectedError) as rejected:
        plan_pod(squid_pod(image="nginx:1.27"))
    assert rejected.value.reason == "UnsupportedImage"
    assert "nginx:1.27" in rejected.value.message


def test_mount_without_volume_is_rejected() -> None:
    pod = squid_pod(volumeMounts=[{"name": "missing", "mountPath": "/x"}])
    with pytest.raises(PodRejectedError, match="no volume"):
        plan_pod(pod)


def test_files_are_laid_out_by_mount_path_and_subpath() -> None:
    plan = plan_pod(squid_pod())
    config = volume_files(
        plan.mounts["/etc/squid/squid.conf"][0], {"squid.conf": "x"}, secret=False
    )
    auth = volume_files(
        plan.mounts["/etc/squid/auth"][0],
        {"passwd": base64.b64encode(b"user:hash").decode()},
        secret=True,
    )
    layout = pod_file_layout(plan, {"/etc/squid/squid.conf": config, "/etc/squid/auth": auth})
    assert layout == {"/etc/squid/squid.conf": b"x", "/etc/squid/auth/passwd": b"user:hash"}


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
pid_filename /run/squid.pid
cache_dir ufs /var/spool/squid 100 16 256
access_log daemon:/var/log/squid/access.log
"""


def test_rewrite_binds_the_pod_ip_and_maps_mounted_paths() -> None:
    config, ports = rewrite_config(
        CONFIG,
        pod_ip="127.9.0.2",
        pod_root="/pods/u/root",
        run_dir="/pods/u/run",
        mount_paths=["/etc/squid/squid.conf", "/etc/squid/auth"],
    )
    assert ports == [3128]
    lines = config.splitlines()
    assert "http_port 127.9.0.2:3128" in lines
    assert (
        "auth_param basic program /usr/lib/squid/basic_ncsa_auth /pods/u/root/etc/squid/auth/passwd"
        in lines
    )
    assert "http_access deny all" in lines
    assert "pid_filename /pods/u/run/squid.pid" in lines
    assert not any(line.startswith("cache_dir") for line in lines)
    assert "pid_filename /run/squid.pid" not in lines
    assert not any("/var/log/squid" in line for line in lines)


def test_rewrite_keeps_port_options_and_replaces_any_bind_address() -> None:
    config, ports = rewrite_config(
        "http_port 0.0.0.0:8080 name=main\n",
        pod_ip="127.9.0.3",
        pod_root="/r",
        run_dir="/run",
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
        rewrite_config(config, pod_ip="127.9.0.4", pod_root="/r", run_dir="/run", mount_paths=[])
    assert rejected.value.reason == "InvalidConfig"
