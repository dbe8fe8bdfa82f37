"""Helpers the suite's tests share: plain modules, imported as ``tests.support.<area>``.

Fixtures stay in the conftests; what a test module or another folder's conftest imports (a
builder, a harness, a constant, a helper function) lives here, never in a conftest.
"""
