import sys

from trellis_cli.main import main

sys.exit(main())
