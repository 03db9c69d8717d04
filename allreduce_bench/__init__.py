"""allreduce-bench: AllReduce algorithms measured like nccl-tests, results as pandas."""
from allreduce_bench.results.load import load_results

__all__ = ["load_results"]
__version__ = "0.1.0"
