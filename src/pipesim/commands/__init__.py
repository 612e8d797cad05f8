"""The core commands, one module per area as render/, planner/, profile/ and runtime/ keep
theirs (``commands.py``): each defines ``add_commands(command)``, which ``parser.make_parser``
calls in ``parser.COMMANDS``' order."""
