"""The ``perfmodel`` command line."""
