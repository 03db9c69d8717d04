import os
import sys
from pathlib import Path

# Spawned ranks import test modules by name: make the tests folder importable for them.
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
os.environ.setdefault("OMP_NUM_THREADS", "1")
