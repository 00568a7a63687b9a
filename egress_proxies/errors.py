"""The operator's one exception root: every error it defines derives from it.

    EgressProxiesError
    ├── ClosedError             errors.py                  (a RuntimeError) new work for a
    │                                                      client or stack worker after close()
    ├── MissingToolError        toolchain.py               (a RuntimeError) a binary is missing
    ├── ConfigurationError      operator/factories.py      (a RuntimeError) the operator
    │                                                      cannot start as set
    ├── StateDirBusyError       operator/state_dir.py      (a RuntimeError) another operator
    │                                                      holds the state dir
    ├── PeeringError            operator/peering.py        (a RuntimeError) the peering object
    │                                                      cannot be read
    ├── ShardError              operator/shard.py          (a ValueError) shard flags that
    │                                                      cannot work, another shard's state dir
    ├── SweepRefusedError       gc/sweeper.py              (a RuntimeError) the GC will not run
    │                                                      half-blind
    ├── StackOperationError     stacks/errors.py           a pulumi up/destroy/refresh failed
    ├── BackendUrlError         stacks/backends/url.py     (a ValueError) an unusable
    │                                                      --state-backend URL
    ├── BackendUnavailableError stacks/backends/blob.py    (an OSError) the state backend
    │                                                      cannot be read now
    ├── PermanentProgramError   stacks/programs/errors.py  (a pulumi.RunError) a spec the
    │                                                      program cannot build: no use retrying
    ├── InventoryError          providers/inventory.py     a provider could not be listed
    ├── CredentialsError        providers/gcp_auth.py      no usable Google credentials
    ├── KubeApiError            kube/errors.py             the Kubernetes API answered an error
    │   ├── NotFoundError       kube/errors.py             404
    │   ├── ConflictError       kube/errors.py             409
    │   └── WatchEventError     kube/reflector.py          an ERROR event on a watch (410 Gone)
    ├── TransportError          kube/errors.py             (an OSError) no answer from the API
    ├── KubeConfigError         kube/errors.py             (a ValueError) unusable kubeconfig
    ├── SelectorError           kube/selectors.py          (a ValueError) a bad label selector
    ├── DiscoveryApiError       discovery/errors.py        a 4xx/5xx the discovery API answers
    ├── InvalidTokenSecretError discovery/auth.py          (a ValueError) unusable token file
    ├── InvalidTtlError         leases/store.py            (a ValueError) TTL out of range
    ├── StoreUnavailableError   leases/store.py            the lease store does not answer
    ├── StartupError            devcluster/controlplane.py (a RuntimeError) a dev cluster
    │                                                      control-plane process did not start
    └── NodeError               devcluster/node.py         (a RuntimeError) the dev cluster's
                                                           node did not start

Where a standard base says what kind of error it is (ValueError for bad
input), the class keeps it as well, so `except ValueError` still works.
`tests/house/test_error_root.py` fails if a new exception class skips the
root, or if this drawing and the classes disagree (a class, its module, its
parent or its standard base).
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
