"""Payments: attempts, the ledger, the provider adapter and the pay flow."""
