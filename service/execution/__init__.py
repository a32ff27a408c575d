"""Execution: argument validation, the execute path, batch, execution log, stored results, /execute, /results."""
