"""Checkpoint doctor: what a given SGLang release will silently do with a draft, before serving it."""
