"""Testing support for deskpool and for plugin and driver authors.

``deskpool.testing.pytest_plugin`` is registered as a pytest plugin (entry point ``pytest11``):
it provides a database per test run, configuration and runtime fixtures, and a running API.
The test identity provider and the driver conformance kit live beside it.
"""
