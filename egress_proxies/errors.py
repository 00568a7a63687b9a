"""The operator's one exception root: every error it defines derives from it.

    EgressProxiesError
    ├── ConfigurationError            operator/factories.py  the operator cannot start as set
    ├── StateDirBusyError             operator/state_dir.py  another operator holds the state dir
    ├── PeeringError                  operator/peering.py    the peering object cannot be read
    ├── SweepRefusedError             gc/sweeper.py      the GC will not run half-blind
    ├── StackOperationError           stacks/runner.py   a pulumi up/destroy/refresh failed
    ├── PermanentProgramError         stacks/programs/errors.py (a pulumi.RunError) no use retrying
    ├── InventoryError                providers/inventory.py  a provider could not be listed
    ├── CredentialsError              providers/gcp_auth.py   no usable Google credentials
    ├── kube.KubeApiError             kube/errors.py     the Kubernetes API answered an error
    │   ├── kube.NotFoundError                                 404
    │   └── kube.ConflictError                                 409
    ├── kube.TransportError           kube/errors.py     (an OSError) no answer from the API
    ├── kube.KubeConfigError          kube/errors.py     (a ValueError) unusable kubeconfig
    ├── DiscoveryApiError             discovery/errors.py  a 4xx/5xx the discovery API answers
    ├── InvalidTokenSecretError       discovery/auth.py  (a ValueError) unusable token file
    ├── InvalidTtlError               leases/store.py    (a ValueError) TTL out of range
    ├── MissingToolError              toolchain.py       a binary is not installed
    ├── ClosedError                   errors.py          (a RuntimeError) a closed client or
    │                                                    stack worker was given new work
    └── dev cluster: StartupError, PodRejectedError, ContainerExitedError

Where a standard base says what kind of error it is (ValueError for bad
input), the class keeps it as well, so `except ValueError` still works.
`tests/unit/test_error_root.py` fails if a new exception class skips the root.
"""

from __future__ import annotations


class EgressProxiesError(Exception):
    """Any error raised by egress-proxies itself (not by a library it calls).

    The operator distribution's root. The crawler client, a separate
    distribution that never imports this one, has its own root of the same
    name (`egress_proxies_client.EgressProxiesError`).
    """


class ClosedError(EgressProxiesError, RuntimeError):
    """New work for a component after its `close()`: a shutdown that closed it too early.

    The Kubernetes client and the stack worker raise it instead of quietly
    opening a new connection pool or starting a new worker process.
    """
