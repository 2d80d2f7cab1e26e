"""The candidate's confinement: Landlock, the PID namespace, the process tree, the launcher between the loop and
candidate code (`python -m autokernel.sandbox.launcher`), and what a child inherits.

Standard library only, and below everything that runs candidate code (docs/threats.md, "The candidate's
sandbox").
"""
