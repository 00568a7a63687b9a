"""Provider-side inventory: list and delete instances tagged with a Proxy UID."""
