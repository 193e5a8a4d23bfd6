"""Operator jobs: each plans, then executes (migrate, backup, sessions end, demo, plugins)."""
