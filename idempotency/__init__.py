"""The Idempotency-Key layer: a retry of an unsafe request replays the first answer."""
