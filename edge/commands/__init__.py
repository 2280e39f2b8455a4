"""One module per ``da3-edge`` subcommand, each with ``main(args=None) -> int``."""
