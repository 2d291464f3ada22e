import sys

from tiling_model.cli import main

sys.exit(main())
