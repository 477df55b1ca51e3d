"""Backend plugins (entry point group `gatekit.backends`): cpu, cuda, metal."""
