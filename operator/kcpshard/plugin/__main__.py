import sys

from kcpshard.plugin.cli import main

sys.exit(main())
