"""The version, in one place (pyproject.toml reads it; modules import it from here, never from the package)."""

__version__ = "0.2.0.dev0"
