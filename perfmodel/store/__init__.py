"""The results store: every path under ``results/<device-key>/`` and the files in it."""
