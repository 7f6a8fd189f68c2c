"""Inbound provider notifications: verify, dedupe, apply once, answer the same."""
