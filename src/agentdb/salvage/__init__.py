"""Recovery engines and the rename protocol."""
