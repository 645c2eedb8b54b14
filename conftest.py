"""Repository root conftest.

The perfmodel plugin itself is loaded through its ``pytest11`` entry point once
the package is installed (``pip install -e .``); nothing needs registering here.
"""
