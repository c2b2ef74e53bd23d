"""lerobench: honest, fast success rates for robot policies on real simulators."""

__version__ = "0.1.0"
