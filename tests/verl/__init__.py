"""Tests of the verl backend on CPU: its configs, driver, pieces, preflight, weight sync, the GPU check, verl's own trainer."""
