"""Policies: the protocol, built-in policies and loaders for user policies."""

from lerobench.policies.base import (
    ObservationNeeds,
    Policy,
    PolicyContext,
    PolicyTraits,
    policy_traits,
    row_generators,
    row_ids,
    row_noise,
)

__all__ = ["ObservationNeeds", "Policy", "PolicyContext", "PolicyTraits", "policy_traits", "row_generators",
           "row_ids", "row_noise"]
