import sys

from model_tools.cli import main

sys.exit(main())
