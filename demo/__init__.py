"""What only the demo runs: the shop's pages (shop), the stand-in provider (sandbox),
the runner and the provider server's URLs.

The product never imports it and never names it: in the demo profile the settings
discover ``demo/plugin.py``, which layers the demo onto them (config/plugins.py).
"""
