import sys

from diag.collector.server import main

sys.exit(main())
