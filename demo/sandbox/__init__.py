"""The sandbox payment provider: a stand-in third party with its own tables and HTTP API.

It plays the role of a real provider (think Alipay or Stripe) so the shop can be
shown failing and recovering. Treat it as another company's code: the shop never
imports it and reaches it only over HTTP (``PROVIDER_BASE_URL``), and it imports
nothing of the shop but the shared problem+json errors.
"""
