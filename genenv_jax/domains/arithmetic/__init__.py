"""Additions: the arithmetic domain (domain.py) and its seed data (data.py)."""
