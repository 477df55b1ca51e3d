"""gatekit's bundled driver plugins (installed as the import package `gatekit_drivers`)."""
