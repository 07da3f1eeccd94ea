"""Arithmetic questions in words for chat models: the domain computes each answer."""
