"""Tests of the config and the grid it expands into: validation, resources, tuning, cost, pairs."""
