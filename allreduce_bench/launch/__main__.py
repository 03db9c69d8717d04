"""`python -m allreduce_bench.launch first-host NODELIST`: for the shell scripts."""
import sys

from allreduce_bench.launch.environments import _main

sys.exit(_main(sys.argv[1:]))
