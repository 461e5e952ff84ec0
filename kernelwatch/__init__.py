"""KernelWatch: one namespace. The library layers are its subpackages (kernels, collect, store, gate,
dashboard); the command line (cli, commands, options, output, dependencies) is the top layer over them.

This file imports nothing, since every import of a subpackage runs it, and no library subpackage imports
the command line. Each subcommand is a module of ``kernelwatch.commands``,
imported only when that subcommand runs.
"""
