"""The VM's user-data: the Proxy's cloud-init and the Squid setup, as cloud-init will read them."""

from __future__ import annotations

import email
from email.message import Message
from typing import Any

import pytest
import yaml

from egress_proxies.model import ProxySpec
from egress_proxies.stacks.inputs import ProgramInputs, ProxyCredentials
from egress_proxies.stacks.programs.gce_vm import (
    AUTH_DIR,
    HELPER_PATH,
    MERGE_TYPE,
    SQUID_CONF_PATH,
    lease_auth,
    render_user_data,
)
from egress_proxies.stacks.programs.squid_config import lease_auth_helper, squid_conf

pytestmark = pytest.mark.unit

KEY = "k" * 64


def inputs(
    cloud_init: str | None = None,
    password: str = "s3cret-password",
    discovery_url: str | None = "http://discovery.example:8090",
) -> ProgramInputs:
    spec = {"zone": "europe-west4-b", "machineType": "e2-small", "image": "ubuntu-2404"}
    return ProgramInputs(
        namespace="crawl",
        name="proxy-a",
        uid="6f1c2a4e-93b7-4d2e-8f1a-0c5e7b9d3a21",
        instance_name="proxy-abcdefghijklmnop",
        spec=ProxySpec.model_validate({"provider": "gcp", "gcp": spec}),
        credentials=ProxyCredentials("crawler", password, KEY),
        cloud_init=cloud_init,
        port=3129,
        discovery_url=discovery_url,
    )


def parts(user_data: str) -> list[Message]:
    message = email.message_from_string(user_data)
    assert message.get_content_type() == "multipart/mixed"
    return [part for part in message.walk() if not part.is_multipart()]


def text(part: Message) -> str:
    payload = part.get_payload(decode=True)
    assert isinstance(payload, bytes)
    return payload.decode()


def squid_config(part: Message) -> dict[str, Any]:
    assert part.get_content_type() == "text/cloud-config"
    assert part["X-Merge-Type"] == MERGE_TYPE
    body = text(part)
    assert body.startswith("#cloud-config\n")
    config: dict[str, Any] = yaml.safe_load(body)
    return config


def test_without_cloud_init_the_user_data_installs_squid_with_the_lease_helper_and_key() -> None:
    [squid] = parts(render_user_data(inputs()))

    config = squid_config(squid)
    assert config["packages"] == ["squid", "perl"]
    files = {entry["path"]: entry for entry in config["write_files"]}
    conf = files[SQUID_CONF_PATH]["content"]
    assert conf == squid_conf(3129, lease_auth=lease_auth(inputs()))
    assert (
        "program /usr/bin/perl /etc/squid/squid_lease_auth.pl /etc/squid/auth crawl/proxy-a "
        "http://discovery.example:8090/v1/proxies/crawl/proxy-a/revocations /var/spool/squid"
    ) in conf
    assert "credentialsttl 2 seconds" in conf
    assert files[HELPER_PATH]["content"] == lease_auth_helper()
    assert files[f"{AUTH_DIR}/signingKey"]["content"] == KEY
    assert files[f"{AUTH_DIR}/username"]["content"] == "crawler"
    for name in ("signingKey", "username", "passwordSha256"):
        assert files[f"{AUTH_DIR}/{name}"]["owner"] == "root:proxy"
        assert files[f"{AUTH_DIR}/{name}"]["permissions"] == "0640"
    assert all(entry["defer"] is True for entry in files.values())
    assert config["runcmd"][-1] == ["systemctl", "restart", "squid"]


def test_the_password_itself_is_never_in_the_user_data() -> None:
    assert "s3cret-password" not in render_user_data(inputs())


def test_without_a_discovery_url_the_helper_checks_signature_and_expiry_only() -> None:
    [squid] = parts(render_user_data(inputs(discovery_url=None)))
    files = {entry["path"]: entry for entry in squid_config(squid)["write_files"]}
    assert " crawl/proxy-a - /var/spool/squid" in files[SQUID_CONF_PATH]["content"]


def test_a_cloud_config_comes_first_verbatim_for_cloud_init_to_type_and_merge() -> None:
    own = "#cloud-config\npackages: [htop]\nruncmd:\n  - echo ready\n"

    user, squid = parts(render_user_data(inputs(own)))

    assert user.get_content_type() == "text/plain"
    assert text(user) == own
    assert "squid" in squid_config(squid)["packages"]


def test_a_shell_script_is_carried_as_its_own_part() -> None:
    script = "#!/bin/sh\necho 'hello from the proxy' > /etc/motd\n"

    user, squid = parts(render_user_data(inputs(script)))

    assert text(user) == script
    assert squid.get_content_type() == "text/cloud-config"


def test_a_multipart_cloud_init_contributes_each_of_its_parts() -> None:
    own = (
        'Content-Type: multipart/mixed; boundary="XX"\nMIME-Version: 1.0\n\n'
        "--XX\nContent-Type: text/x-shellscript\n\n#!/bin/sh\necho a\n"
        "--XX\nContent-Type: text/cloud-config\n\n#cloud-config\npackages: [jq]\n"
        "--XX--\n"
    )

    script, config, squid = parts(render_user_data(inputs(own)))

    assert script.get_content_type() == "text/x-shellscript"
    assert config.get_content_type() == "text/cloud-config"
    assert "packages: [jq]" in text(config)
    assert squid["X-Merge-Type"] == MERGE_TYPE


def test_the_same_inputs_render_the_same_bytes_so_an_unchanged_proxy_is_not_replaced() -> None:
    own = "#cloud-config\npackages: [htop]\n"

    assert render_user_data(inputs(own)) == render_user_data(inputs(own))
    assert render_user_data(inputs(own)) != render_user_data(inputs(own, password="rotated"))
    assert render_user_data(inputs(own)) != render_user_data(inputs(own + "# edited\n"))


def test_a_single_part_mime_document_keeps_its_type() -> None:
    own = "Content-Type: text/x-shellscript\nMIME-Version: 1.0\n\n#!/bin/sh\necho a\n"

    script, _squid = parts(render_user_data(inputs(own)))

    assert script.get_content_type() == "text/x-shellscript"
    assert text(script) == "#!/bin/sh\necho a\n"


def test_non_ascii_cloud_init_survives_the_encoding() -> None:
    own = "#cloud-config\n# Grüße aus dem Proxy\npackages: [htop]\n"

    user, _squid = parts(render_user_data(inputs(own)))

    assert text(user) == own
