"""Executors: turn (plan, work units) into episode records handed to the sink (docs/scaling.md)."""
