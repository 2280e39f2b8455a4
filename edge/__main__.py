from edge.cli import entry

entry()
