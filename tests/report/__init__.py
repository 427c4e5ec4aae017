"""Tests of aggregation and the report: statistics, claims, tables, figures, the HTML page, stale results."""
