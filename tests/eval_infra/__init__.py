"""Tests of the evaluation infrastructure: sandbox, tasks, records, backends."""
