"""The analysis side of a run: records and aggregates, trials, statistics, compare, merge, report, charts.

Everything here reads or writes run directories; nothing runs a simulator or a policy.
"""
