"""agentdb: the state backend and operator toolkit for agent session files."""

__version__ = "0.1.0"
