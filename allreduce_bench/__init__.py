"""allreduce-bench: AllReduce algorithms measured like nccl-tests, results as pandas."""
__all__ = ["load_results"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """`allreduce_bench.load_results` (with the features' rows, as every command reads them),
    imported on first use: the CLI starts without pandas (so a Ctrl-C while it starts is one line)."""
    if name == "load_results":
        from functools import partial

        from allreduce_bench.core.results.load import load_results
        from allreduce_bench.plugins import hooks
        return partial(load_results, kinds=hooks().row_kinds)
    raise AttributeError(f"module 'allreduce_bench' has no attribute {name!r}")
