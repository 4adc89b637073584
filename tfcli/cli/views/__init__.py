"""What the commands draw: terminal tables and text, from the dicts and arrays the commands hand
over. Drawing only: no arguments, no files, no engine calls; numbers are written by tfcli/numbers.py.
"""
