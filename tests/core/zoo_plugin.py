"""A third-party algorithm for the plug-in test: installed into a temporary directory as the
package `zoo_plugin_pkg` with an entry point in `allreduce_bench.core.algorithms` (see test_zoo.py)."""

PLUGIN_MODULE = '''"""Sum by the backend's all_reduce, with no cost declared."""
DESCRIPTION = "test plug-in: the backend's all_reduce, no cost declared"


def build(tensor, world):
    import torch.distributed as dist

    group = world.process_group
    return lambda: dist.all_reduce(tensor, group=group)


def supports(world_size, ranks_per_node, backend):
    return None if world_size & (world_size - 1) == 0 else "power-of-two world sizes only"
'''
