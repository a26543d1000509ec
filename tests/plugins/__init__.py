"""Plugins the tests register through ``CEMLAB_PLUGINS`` (modules outside the cemlab package; not test modules)."""
