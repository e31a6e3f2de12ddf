import sys

from edgeship.cli import main

sys.exit(main())
