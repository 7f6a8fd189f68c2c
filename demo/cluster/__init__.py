"""`make cluster`: the shop on this machine's loopback as a cluster of real engines."""
