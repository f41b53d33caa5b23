"""Schema validation and compatibility checking for the broker's schema registry."""
