"""Route modules, one per area of the API; each handler calls one ``runner.operations`` function."""
