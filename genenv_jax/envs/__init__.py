"""Environments the agent acts in, for episodic task domains: the
fixed-shape interface (base.py), Python environments behind it (host.py), and
BFCL's multi-turn APIs as a pure transition of the episode so far
(bfcl_multi_turn.py)."""
