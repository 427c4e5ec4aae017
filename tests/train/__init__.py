"""Tests of training: the algorithms, the embedded trainer and its engine, runs, the served teacher."""
