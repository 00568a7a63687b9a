"""What can go wrong talking to the Kubernetes API, as types callers can catch.

EgressProxiesError
├── KubeApiError         the API server answered 4xx/5xx (`status`, `reason`)
│   ├── NotFoundError         404
│   └── ConflictError         409: already exists, or a precondition/version mismatch
├── TransportError       (also an OSError) no answer: connect, TLS, timeout,
│                        or the exec credential plugin failed
└── KubeConfigError      (also a ValueError) the kubeconfig cannot be used
"""

from __future__ import annotations

from egress_proxies.errors import EgressProxiesError


class KubeApiError(EgressProxiesError):
    """The API server answered with a non-2xx status; `status` and `reason` come from its body."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFoundError(KubeApiError):
    """404: the object (or its collection, or its kind) does not exist."""


class ConflictError(KubeApiError):
    """409: the object exists already, or a precondition or resourceVersion did not match."""


class TransportError(EgressProxiesError, OSError):
    """The request got no answer (connection, TLS, timeout, credential plugin).

    An OSError too, so retry loops that treat network errors as transient keep working.
    """


class KubeConfigError(EgressProxiesError, ValueError):
    """The kubeconfig or in-cluster service account cannot be read or used."""


_BY_STATUS: dict[int, type[KubeApiError]] = {404: NotFoundError, 409: ConflictError}


def api_error(status: int, reason: str, message: str) -> KubeApiError:
    """The most specific KubeApiError for an HTTP status."""
    return _BY_STATUS.get(status, KubeApiError)(status, reason, message)
