"""`python -m allreduce_bench.core.launch first-host NODELIST`: for the shell scripts."""
import sys

from allreduce_bench.core.launch.local import _main

sys.exit(_main(sys.argv[1:]))
