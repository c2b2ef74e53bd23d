"""From settings to a validated plan.

``RunSettings`` and ``RunPlan`` (``planner``), a run's identity, shards, the ``--until`` rule (``stopping``) and
``--versus``.
"""
