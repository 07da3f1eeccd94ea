"""BFCL multi-turn tool use: the domain (domain.py), the host environment over BFCL's APIs
(env.py), seeds and the held-out set (data.py)."""
