"""What only the demo runs: the shop's pages (shop), the stand-in provider (sandbox), the
embedded services, the runner, the catalogue compiler and the provider server's URLs.

The product never imports it; settings name its apps, as strings, in the demo profile only.
"""
