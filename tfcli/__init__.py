"""tfcli: a readable NumPy transformer, and a command line that shows what it is made of."""

__version__ = "0.1.0"
