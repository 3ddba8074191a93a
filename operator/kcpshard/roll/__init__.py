"""roll."""
