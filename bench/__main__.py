"""``python -m bench``: the store benchmark of bench/run.py.

The Bloom filter benchmark is ``python -m bench.bloom_bench``; the reads-avoided
experiment ``python -m bench.reads_avoided``.
"""

import sys

from bench.run import main

sys.exit(main())
