"""Policies: the protocol, built-in policies and loaders for user policies."""

from lerobench.policies.base import ObservationNeeds, Policy, PolicyContext

__all__ = ["ObservationNeeds", "Policy", "PolicyContext"]
