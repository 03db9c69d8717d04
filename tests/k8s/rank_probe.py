"""Started in place of `allreduce_bench <command>` by test_pod_env.py: one line per rank saying
what the project reads from the environment its launcher and controller gave it."""
import json
import os
import socket

from allreduce_bench.core.environment import KUBERNETES_NODE_ENV, launcher_env, master_of

env = launcher_env()
print("rank-probe " + json.dumps({
    "rank": env.rank, "world_size": env.world_size, "local_rank": env.local_rank,
    "local_world_size": env.local_world_size, "node_rank": env.node_rank, "launcher": env.launcher,
    "master": list(master_of(env)), "host": socket.gethostname(), "node": os.environ.get(KUBERNETES_NODE_ENV)}),
    flush=True)
