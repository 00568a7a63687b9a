"""Every label, annotation and finalizer key the product writes, in one place.

Keys on Kubernetes objects are `crawl.example.com/<name>`; keys on GCE VMs
(whose label keys allow no `/` or `.`) are `egress-proxies-<name>`.
"""

from __future__ import annotations

from egress_proxies.model import GROUP

# Labels on Kubernetes objects.
UID_LABEL = f"{GROUP}/proxy-uid"  # every object a Proxy's stack creates: the Proxy's uid
SHARD_LABEL = f"{GROUP}/shard"  # everything a sharded operator creates: the shard's name
# Marks the Secret an External Proxy names for its credentials, so watches can select it.
EXTERNAL_CREDENTIALS_LABEL = f"{GROUP}/proxy-credentials"
CLOUD_INIT_LABEL = f"{GROUP}/cloud-init"  # a Secret holding a GCE Proxy's user-data
POOL_LABEL = f"{GROUP}/pool"  # a pool's member: the pool's name
TEMPLATE_HASH_LABEL = f"{GROUP}/pool-template-hash"  # a member: the template it was made from

# Annotations on a Proxy.
SPEC_HASH_ANNOTATION = f"{GROUP}/spec-hash"  # the spec its stack was last brought up with
OWNER_ANNOTATION = f"{GROUP}/owner-shard"  # the shard whose stack holds its resources
DRAINING_ANNOTATION = f"{GROUP}/draining"  # set (to when it started) on a member being removed
# Wake-ups (`proxies/wakeup.py`): set to make the Proxy controller look at a Proxy again.
REQUEUE_ANNOTATION = f"{GROUP}/requeue-at"  # a retry is due
INSTANCE_STATE_ANNOTATION = f"{GROUP}/instance-state"  # its pod's state changed
CLOUD_INIT_REVISION_ANNOTATION = f"{GROUP}/cloud-init-revision"  # its user-data changed
TAKEOVER_ANNOTATION = f"{GROUP}/taken-over"  # a replica started work, and it had not settled
# The GC asks for a vanished instance to be recreated; the controller answers when done.
RECONCILE_REQUEST_ANNOTATION = f"{GROUP}/reconcile-request"
RECONCILE_HANDLED_ANNOTATION = f"{GROUP}/reconcile-handled"

# The Proxy controller's finalizer (a shard's is `<FINALIZER>-<shard>`).
FINALIZER = f"{GROUP}/finalizer"

# Labels on GCE VMs.
GCE_UID_LABEL = "egress-proxies-uid"
GCE_SHARD_LABEL = "egress-proxies-shard"
