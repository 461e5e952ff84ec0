"""`python -m kernelwatch` is `kernelwatch`."""

from kernelwatch.cli import main

main(prog_name="kernelwatch")
