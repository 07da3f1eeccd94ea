"""Host-side environments the agent acts in step by step (plain Python, no JAX)."""
