"""Catalogue, inventory and orders."""
