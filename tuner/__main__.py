import sys

from tiling_model.extras import missing_extra

try:
    from tuner.cli import main

    code = main()
except ModuleNotFoundError as e:  # the serving install has no optuna, scipy or the CPU twin's ml_dtypes
    line = missing_extra(e, "python -m tuner")
    if line is None:
        raise
    print(line, file=sys.stderr)
    code = 2
sys.exit(code)
