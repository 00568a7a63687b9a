"""The Proxy controller: one Proxy's machine, its kopf shell, and what it writes.

- `reconcile`: the pure state machine (what to do next, from what was read);
- `handlers`: its kopf registration; `shell`: one reconcile, reading through
  `observe` and acting through `effects` (writes, stack runs);
- `status`, `readiness`, `lifecycle`, `health_status`: what a Proxy's status
  says and how it is written;
- `cloud_init`, `credentials`, `instances`: what a Proxy owns beside its stack;
- `wakeup`, `watches`, `requeue`: when a Proxy is looked at again;
- `standby`: what the handlers do on a replica that is not at work;
- `sharding`, `filters`: which Proxies this controller handles.

The process that hosts this controller beside the pool controller is
`egress_proxies.operator`.
"""
