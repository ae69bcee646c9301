"""The `hicache-sim` command line (also `python -m sim`): the group and its shared parts in
`app`, the commands in `runs`, `studies` and `plan`.

Exit codes: 0 success; 2 bad input (file, schema, unknown key: the message names both, and
nothing is written); 1 anything else.
"""

from sim.cli import plan, runs, studies
from sim.cli.app import cli, main

__all__ = ["cli", "main", "plan", "runs", "studies"]
