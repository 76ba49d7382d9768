"""Fusion: planning groups of ops in a device's stream (backend-independent)."""
