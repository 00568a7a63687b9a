"""Pulumi Automation API runner, stack naming and the inline programs."""
