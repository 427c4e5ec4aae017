"""SCOUT experiment pipeline: config -> grid -> train -> evaluate -> aggregate."""

__version__ = "0.1.0"
