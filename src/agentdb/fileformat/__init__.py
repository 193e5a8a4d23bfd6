"""Pure readers of SQLite's on-disk formats (no SQLite calls, no policy)."""
