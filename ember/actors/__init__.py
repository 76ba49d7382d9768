"""The runtime: device actors, their IR messages, waiters for reads, shutdown."""
