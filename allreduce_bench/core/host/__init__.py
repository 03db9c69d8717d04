"""This host as the ranks and checks see it: its GPUs (NVML, else nvidia-smi), its cgroup and its
processes (psutil), each read in one module. No torch."""
