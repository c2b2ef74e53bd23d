"""Everything a run writes while it lasts.

The sink (the single consumer of episode records), videos, trajectories, Rerun recordings, progress, provenance and
the output directory.
"""
