"""The child process of the CLI kill tests: ``mbkkm ...`` in a fork of a server
that has mbkkm's CLI imported (imported by name as ``_cli_child``)."""

from __future__ import annotations


def run_cli(args, started) -> None:
    """Run the command line with ``args``; ``started`` (an Event) is set first."""
    from mbkkm.cli import main

    started.set()
    main.main(args, standalone_mode=False)
