"""Look at a Proxy again: the one way anything asks the Proxy controller to run.

A wake-up is an annotation write on the Proxy, an ordinary update, so kopf
runs the Proxy's update handlers at once. Each reason keeps its own key
(`vocabulary.py`): a value that did not change is a no-op patch, so a pod
event that changes nothing the controller reads (its signature is the same)
wakes nothing, whatever the other reasons wrote in between; and the GC's
request is answered by `reconcile-handled`, which needs its own key to compare.

Who rings, and why:
- the requeue timer (`requeue.py`): a retry is due (`RETRY`, the time);
- the instance watch: the Proxy's pod changed (`INSTANCE`, its signature);
- the cloud-init watch: a GCE Proxy's user-data changed (`CLOUD_INIT`, its revision);
- the orphan GC and the GCE instance watch: the instance vanished, bring it
  up again (`RECREATE`, the time);
- the replica that starts work (`operator/takeover.py`): the Proxy has not
  settled and the handling so far may have been another replica's
  (`TAKEOVER`, the time).

A ring the API server does not answer (no connection, a timeout, 429 or a
5xx) is tried again a few times, waiting longer each time: a watch handler
that rings is not retried by kopf, and a lost wake-up leaves the Proxy
waiting for its next event, which may be minutes away.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from enum import StrEnum

from egress_proxies.clock import Clock, k8s_micro_time
from egress_proxies.kube.client import Patcher, annotate
from egress_proxies.kube.errors import KubeApiError, TransportError
from egress_proxies.kube.resources import PROXIES
from egress_proxies.vocabulary import (
    CLOUD_INIT_REVISION_ANNOTATION,
    INSTANCE_STATE_ANNOTATION,
    RECONCILE_REQUEST_ANNOTATION,
    REQUEUE_ANNOTATION,
    TAKEOVER_ANNOTATION,
)

logger = logging.getLogger(__name__)

Ring = Callable[[str, str, str], Awaitable[None]]  # (namespace, name, value)
RING_ATTEMPTS = 5
RING_FIRST_WAIT = 0.5  # seconds before the second attempt; doubled for each next one


class Reason(StrEnum):
    """Why a Proxy is looked at again."""

    RETRY = "retry"
    INSTANCE = "instance"
    CLOUD_INIT = "cloud-init"
    RECREATE = "recreate"
    TAKEOVER = "takeover"


_KEYS = {
    Reason.RETRY: REQUEUE_ANNOTATION,
    Reason.INSTANCE: INSTANCE_STATE_ANNOTATION,
    Reason.CLOUD_INIT: CLOUD_INIT_REVISION_ANNOTATION,
    Reason.RECREATE: RECONCILE_REQUEST_ANNOTATION,
    Reason.TAKEOVER: TAKEOVER_ANNOTATION,
}


class Bell:
    """Rings a Proxy: writes the reason's annotation (a Proxy that is gone is left alone)."""

    def __init__(self, client: Patcher, clock: Clock) -> None:
        self._client = client
        self._clock = clock

    def __repr__(self) -> str:
        return "<Bell>"

    async def ring(
        self, namespace: str, name: str, reason: Reason, value: str | None = None
    ) -> None:
        """Wake the Proxy for `reason`; `value` defaults to the time now."""
        stamp = value if value is not None else k8s_micro_time(self._clock.utcnow())
        wait = RING_FIRST_WAIT
        for attempt in range(1, RING_ATTEMPTS + 1):
            try:
                await annotate(self._client, PROXIES.path(namespace, name), _KEYS[reason], stamp)
                return
            except (TransportError, KubeApiError) as error:
                if attempt == RING_ATTEMPTS or not _unanswered(error):
                    raise
                what = f"proxy {namespace}/{name}: ringing ({reason}) again in {wait:.1f} s"
                logger.info("%s: %s", what, error)
            await self._clock.sleep(wait)
            wait *= 2

    def ringer(self, reason: Reason) -> Ring:
        """`ring` for one reason, as a (namespace, name, value) callable."""

        async def ring(namespace: str, name: str, value: str) -> None:
            await self.ring(namespace, name, reason, value)

        return ring

    async def recreate(self, namespace: str, name: str) -> None:
        """Ask the controller (the only stack writer) to bring a vanished instance up again."""
        await self.ring(namespace, name, Reason.RECREATE)


def _unanswered(error: Exception) -> bool:
    """No answer, or one that says to come back: worth another try."""
    if isinstance(error, KubeApiError):
        return error.status == 429 or error.status >= 500
    return True
