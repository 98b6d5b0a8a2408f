"""
Reduced from karpathy/nanoGPT@3adf61e154c3fe3fca428ad6bc3818b27a3b8291:configurator.py (MIT).
Poor Man's Configurator, exec'd from train.py / sample.py: --key=value arguments override the globals.
(Config-file arguments are dropped: the corpus passes none.)
"""
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    assert arg.startswith('--') and '=' in arg, arg
    key, val = arg.split('=')
    key = key[2:]
    if key in globals():
        try:
            attempt = literal_eval(val)
        except (SyntaxError, ValueError):
            attempt = val
        assert type(attempt) == type(globals()[key])
        print(f"Overriding: {key} = {attempt}")
        globals()[key] = attempt
    else:
        raise ValueError(f"Unknown config key: {key}")
