"""Environments the agent acts in, for episodic task domains (see base.py)."""
