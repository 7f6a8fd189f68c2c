"""The second hour, scripted: what a newcomer does after `make demo` (`make walk`)."""
