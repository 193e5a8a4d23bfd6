"""Man pages (roff), generated from the click tree by agentdb.cli.manpages."""
