"""An emulated multi-node cluster on one machine (network namespaces, veth, tc); the command is emulate/cli.py."""
