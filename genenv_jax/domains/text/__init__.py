"""Text tasks on a real tokenizer: the domain (domain.py), its verifiers (verifiers.py) and
seed records (data.py)."""
