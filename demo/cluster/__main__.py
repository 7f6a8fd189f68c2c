import sys

from demo.cluster.runner import main

sys.exit(main())
