"""Benchmarks: each ``bench/<name>.py`` runs a workload of WORKLOADS.md beside its peers in one
run, prints a table and writes ``bench/results/<name>.json``. ``--quick`` finishes in 90 s.
"""
