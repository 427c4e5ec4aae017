"""Tests of data preparation and the toy world's data."""
