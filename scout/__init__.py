"""SCOUT experiment pipeline: config -> grid -> train -> evaluate -> report (aggregate, render)."""

__version__ = "0.1.0"
