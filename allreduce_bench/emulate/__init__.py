"""An emulated multi-node cluster on one machine (network namespaces, veth, tc): cluster.py builds
and shapes it, processes.py starts and stops one torchrun per host, session.py runs benchmarks
on it; the `emulate` command is emulate/cli.py."""
