"""What both halves share and neither owns: crash-safe files, outcome metrics, plots, `key=value` parsing,
the one-line-error argument parser.

Imports neither jax nor torch, and nothing from `muse_jax` or `llm_side`: both import it, never each
other (see docs/architecture.md).
"""
