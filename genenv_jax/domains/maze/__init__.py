"""Mazes: the domain and its JAX environment (domain.py), seed grids and edits (data.py)."""
