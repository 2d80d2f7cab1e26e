"""The ground floor: where files are, the records the stages pass, dtypes, the GPU's figures, the interpreter switch.

Every other layer may import these modules; they import nothing of the package above them. Nothing here runs on
import: bench.py and the sandbox launcher import parts of the package and must stay fast (docs/architecture.md,
"The house").
"""
