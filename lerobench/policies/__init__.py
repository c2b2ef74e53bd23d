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
from lerobench.policies.batch import Observation, PolicyBatch, RowInfo

__all__ = ["Observation", "ObservationNeeds", "Policy", "PolicyBatch", "PolicyContext", "PolicyTraits", "RowInfo",
           "policy_traits", "row_generators", "row_ids", "row_noise"]
