"""Privileged scripted experts: policies that read the simulator's state instead of learning from pixels."""
