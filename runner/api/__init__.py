"""The HTTP API (FastAPI). ``create_app()`` builds the application; route handlers stay thin."""
