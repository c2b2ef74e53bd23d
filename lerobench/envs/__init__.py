"""Simulator backends and the lazy env / vector env construction around them."""
