"""The HTTP edge: what every request crosses before and after the apps.

Errors and problem+json, the strict JSON parser, input bounds and fields, auth,
throttles and rate limits, sessions, the OpenAPI schema, pagination, the request
limits, the Content-Security-Policy, the admin's read-only base and the Redis client.
"""
