"""What each command can be told: one pydantic model per command, from shared parts.

`run` takes `RunSettings`, `discovery` takes `DiscoverySettings`, `dev-cluster
up|down` take `DevClusterUpSettings`/`DevClusterDownSettings`. The operator and
the tier share the sub-models of the lease store and limits (`leases.py`),
the discovery API (`server.py`) and the kubeconfig (`cluster.py`); the
operator adds telemetry (`telemetry.py`) and its own options (`run.py`).
Each field is one option (`options.py`): `cli.py` builds the flags and
`--help` from the fields, pydantic-settings reads the variables.
"""

from egress_proxies.settings.cluster import ClusterSettings
from egress_proxies.settings.console import ConsoleSettings
from egress_proxies.settings.dev_cluster import DevClusterDownSettings, DevClusterUpSettings
from egress_proxies.settings.discovery import DiscoverySettings
from egress_proxies.settings.environment import drop_trace_context, process_environment
from egress_proxies.settings.leases import LeaseLimitSettings, LeaseSettings, LeaseStoreSettings
from egress_proxies.settings.options import ENV_PREFIX, Options, flag_of, form_of, variables_of
from egress_proxies.settings.run import RunSettings
from egress_proxies.settings.server import DiscoveryServerSettings
from egress_proxies.settings.telemetry import TelemetrySettings

__all__ = [
    "ENV_PREFIX",
    "ClusterSettings",
    "ConsoleSettings",
    "DevClusterDownSettings",
    "DevClusterUpSettings",
    "DiscoveryServerSettings",
    "DiscoverySettings",
    "LeaseLimitSettings",
    "LeaseSettings",
    "LeaseStoreSettings",
    "Options",
    "RunSettings",
    "TelemetrySettings",
    "drop_trace_context",
    "flag_of",
    "form_of",
    "process_environment",
    "variables_of",
]
