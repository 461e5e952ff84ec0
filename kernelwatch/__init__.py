"""The `kernelwatch` command line: the top layer, over kernels, collector, db, dashboard and ci.

No library package imports this one. Each subcommand is a module of ``kernelwatch.commands``,
imported only when that subcommand runs.
"""
