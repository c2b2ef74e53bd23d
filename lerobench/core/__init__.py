"""The ground floor: plain data every stage shares; it imports no stage.

Records, results, run directories, identity, shards, atomic files, provenance, the task run, call statistics and
the executor table (docs/architecture.md).
"""
