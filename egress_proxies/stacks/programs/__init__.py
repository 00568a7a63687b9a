"""Inline Pulumi programs: a Squid pod in the cluster, a GCE VM running Squid."""
