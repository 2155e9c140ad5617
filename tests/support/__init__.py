"""Shared test support: the real-container harness lives in :mod:`tests.support.containers`."""
