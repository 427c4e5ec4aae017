"""Tests of evaluation: grading, the sandbox, vLLM."""
