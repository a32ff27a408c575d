"""Benchmarks behind `toolscout bench`: each prints a table and can write JSON."""
