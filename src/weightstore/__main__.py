"""`python -m weightstore` runs the command line."""

from weightstore.cli import console_main

console_main()
