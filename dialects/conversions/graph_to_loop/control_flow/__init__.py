"""Control flow: Scan and Loop."""
