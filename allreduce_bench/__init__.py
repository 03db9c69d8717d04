"""allreduce-bench: AllReduce algorithms measured like nccl-tests, results as pandas."""
__all__ = ["load_results"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """`allreduce_bench.load_results`, imported on first use: the CLI starts without pandas
    (and so a Ctrl-C while it starts is one line, see allreduce_bench/cli.py)."""
    if name == "load_results":
        from allreduce_bench.core.results.load import load_results
        return load_results
    raise AttributeError(f"module 'allreduce_bench' has no attribute {name!r}")
