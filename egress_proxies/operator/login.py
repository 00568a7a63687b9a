"""kopf's login: the same identity the operator's own client uses, whatever its auth kind."""

from __future__ import annotations

from typing import Any

import kopf

from egress_proxies.kube import Credentials, LoginMaterial


def connection_info(material: LoginMaterial) -> kopf.ConnectionInfo:
    """kopf's ConnectionInfo for one snapshot of the credentials.

    kopf logs in again when the server refuses a request (401) or once
    `expiration` passes, so a rotated token file or an expiring exec-plugin
    token is picked up without a restart.
    """
    return kopf.ConnectionInfo(
        server=material.server,
        ca_data=material.ca_pem,
        insecure=material.insecure or None,
        scheme="Bearer" if material.token else None,
        token=material.token,
        certificate_data=material.certificate_pem,
        private_key_data=material.private_key_pem,
        username=material.username,
        password=material.password,
        expiration=material.expiration,
    )


def register_login(registry: kopf.OperatorRegistry, credentials: Credentials) -> None:
    """Make kopf log in with `credentials` instead of its own kubeconfig discovery."""

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(await credentials.login_material())
