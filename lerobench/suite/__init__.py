"""Suites: what a benchmark is.

Frozen config dataclasses read from strict TOML (``config``); where suites and backends are found (``registry``).
"""
