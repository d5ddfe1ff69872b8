"""Screens pushed over the monitor (help)."""
