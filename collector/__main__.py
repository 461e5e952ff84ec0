"""`python -m collector` is `kernelwatch`."""

from collector.cli import main

main(prog_name="kernelwatch")
