"""allreduce-bench: AllReduce algorithms measured like nccl-tests, results as pandas."""
__all__ = ["load_results"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """`allreduce_bench.load_results` (with what the features lend, as under the CLI), imported
    on first use: the CLI starts without pandas (so a Ctrl-C while it starts is one line)."""
    if name == "load_results":
        from functools import partial

        from allreduce_bench.cli import extensions
        from allreduce_bench.core.results.load import load_results
        return partial(load_results, lent=extensions())
    raise AttributeError(f"module 'allreduce_bench' has no attribute {name!r}")
