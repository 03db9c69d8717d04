"""Short excerpts of NCCL debug logs as their authors published them, one shape each (the
source above every excerpt). Lines are as printed; a few are cut out of longer windows.
The long logs of ../shared/data (published-logs/02, nccl-info/) are read from there."""
# ruff: noqa: E501  (log lines at their own width)

# NVIDIA/nccl#952 "NCCL INFO NET/IB : No device found" (2023): 2.18, the host name redacted as
# `<cluster_name>`, the network fell back to sockets: `via NET/Socket/3`
SOCKET_FALLBACK = """\
<cluster_name>:919:1150 [0] NCCL INFO Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read
<cluster_name>:919:1150 [0] NCCL INFO Channel 02/0 : 8[0] -> 15[7] via P2P/IPC/read
<cluster_name>:926:1151 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3
<cluster_name>:926:1151 [7] NCCL INFO Channel 07/0 : 15[7] -> 6[6] [send] via NET/Socket/3
<cluster_name>:921:1146 [2] NCCL INFO Channel 00/0 : 10[2] -> 9[1] via P2P/IPC/read
"""

# ROCm/rccl#1026 "RCCL and MI250X P2P": RCCL appends `comm 0x... nRanks 08` to channel lines
RCCL_CHANNELS = """\
g1072:1263985:1264007 [0] NCCL INFO Channel 02/0 : 1[c6000] -> 4[c1000] [receive] via NET/Socket/1 comm 0x95cdeb0 nRanks 08
g1064:11144:11196 [1] NCCL INFO Channel 02/0 : 1[c6000] -> 4[c1000] [send] via NET/Socket/1 comm 0x9e4d8d0 nRanks 08
g1072:1263988:1264006 [3] NCCL INFO Channel 00/0 : 7[ce000] -> 5[c6000] via P2P/IPC comm 0xfb16e30 nRanks 08
g1064:11145:11195 [2] NCCL INFO Channel 01/0 : 2[c9000] -> 0[c1000] via P2P/IPC comm 0x10a5a9f0 nRanks 08
g1072:1263986:1264008 [1] NCCL INFO Connected all rings comm 0xa5bff40 nRanks 08 busId c6000
"""

# ROCm/rccl#1454 and ROCm/rccl-tests#163: the RCCL banner (bare lines), a WARN whose origin is
# an absolute path, rccl-tests' own lines in between
RCCL_BANNER = """\
UVOSLinux:2421:2421 [0] /usr/src/debug/rccl/build/hipify/src/misc/api_trace.cc:283 NCCL WARN [rocprofiler-sdk-rccl][2421] rocprofiler-register failed with error code 4 : Library's API is not supported
# nThread 1 nGpus 2 minBytes 2 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
rccl-tests: Version develop:ae3e635
UVOSLinux:2421:2421 [0] NCCL INFO Bootstrap : Using bond0:10.0.0.2<0>
UVOSLinux:2421:2421 [0] NCCL INFO NET/Plugin: No plugin found (librccl-net.so)
UVOSLinux:2421:2421 [0] NCCL INFO Kernel version: 6.6.64-1
RCCL version : 2.21.5-main:a29a210+
HIP version  : 6.2.41134-
ROCm version : 6.2.4.0-139
z292:58192:58200 [2] NCCL INFO NET/Socket : Using [0]eno2np1:192.168.2.194<0>
z292:58192:58200 [2] NCCL INFO Using network Socket
"""

# NVIDIA/nccl#1814 (2025): the HPC-X plugin's `NET/IBext_v8`, P2P/CUMEM within the node
IB_PLUGIN = """\
hostname-test:981:1267 [1] NCCL INFO Channel 01/0 : 26[2] -> 33[1] [receive] via NET/IBext_v8/4
hostname-test:981:1267 [1] NCCL INFO Channel 00/0 : 33[1] -> 40[0] [send] via NET/IBext_v8/7
hostname-test:980:1265 [0] NCCL INFO Channel 00/0 : 32[0] -> 39[7] via P2P/CUMEM
hostname-test:980:1265 [0] NCCL INFO Channel 01/0 : 32[0] -> 39[7] via P2P/CUMEM
"""

# NVIDIA/nccl#1291 "nccl-tests with two GH200 over Quantum2 iB stuck": SHARP in the NIC list,
# the plugin's network, the 2.19+ layout line
SHARP = """\
gh1:185972:186354 [0] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so
gh1:185972:186354 [0] NCCL INFO P2P plugin IBext_v8
gh1:185972:186354 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to bond0
gh1:185972:186354 [0] NCCL INFO NET/IB : Using [0]mlx5_2:1/IB/SHARP [RO]; OOB bond0:X.X.X.X<0>
gh1:185972:186354 [0] NCCL INFO Using non-device net plugin version 0
gh1:185972:186354 [0] NCCL INFO Using network IBext_v8
gh2:15475:15858 [0] NCCL INFO ncclCommInitRank comm 0xaaae51121510 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 901000 commId 0x6e99db63b024eb76 - Init START
gh1:185972:186354 [0] NCCL INFO ncclCommInitRank comm 0xaaacf8930f40 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 901000 commId 0x6e99db63b024eb76 - Init START
gh2:15475:15858 [0] NCCL INFO comm 0xaaae51121510 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
gh1:185972:186354 [0] NCCL INFO comm 0xaaacf8930f40 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
gh1:185972:186354 [0] NCCL INFO Channel 00/04 :    0   1
"""

# NVIDIA/nccl#857 (2.10) and NVIDIA/nccl#367 (2.5, a container id as host name): WARNs with their
# origin file, TensorFlow's own log line and NCCL's banner interleaved
WARN_ORIGIN = """\
ai:480850:480850 [0] NCCL INFO Bootstrap : Using eth0:162.30.2.40<0>

ai:480850:480850 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]
ai:480850:480850 [0] NCCL INFO NET/Socket : Using [0]eth0:162.30.2.40<0>
ai:480850:480850 [0] NCCL INFO Using network Socket
NCCL version 2.10.3+cuda11.3
26a46eb2b1d3:111329:111329 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]
26a46eb2b1d3:111315:111399 [0] NCCL INFO NCCL_TREE_THRESHOLD set by environment to 0.
2020-12-04 00:05:43.144250: I tensorflow/core/nccl/nccl_manager.cc:306] 3 $$$$$$$$$$$$$$1
wangying-system:7436:7593 [0] NCCL INFO Intel CPU (PCI 12, InterCpu 8)
wangying-system:7436:7593 [0] NCCL INFO /sys/devices/pci0000:00/0000:00:1f.6 -> 0/0/0/0
wangying-system:7436:7593 [0] NCCL INFO === System : maxWidth 21 maxSpeed 21 ===
"""

# devopsrustem/slurmv4, notes under 3/ quoting NCCL 2.27.5 logs of an SGLang job (hosts
# tpgds-aihub0007/0008, 2026): PXN sends `via NET/IB/0(8)/GDRDMA`, a WARN with NCCL's default
# WARN timestamp `[%F %T] ` in front, the failure's call path after it, `NCCL_IB_HCA set to`
PXN_TIMESTAMPS = """\
tpgds-aihub0008:181412:181412 [1] NCCL INFO Channel 00/0 : 9[1] -> 0[0] [send] via NET/IB/0(8)/GDRDMA
tpgds-aihub0008:181411:181411 [0] NCCL INFO Channel 00/0 : 1[1] -> 8[0] [receive] via NET/IB/0/GDRDMA
tpgds-aihub0008:181411:181411 [0] NCCL INFO Channel 00/0 : 8[0] -> 15[7] via P2P/IPC
tpgds-aihub0008:181411:181411 [0] NCCL INFO Connected all rings, use ring PXN 1 GDR 1
tpgds-aihub0008:181415:181415 [4] NCCL INFO 4 coll channels, 4 collnet channels, 0 nvls channels, 4 p2p channels, 1 p2p channels per peer
tpgds-aihub0008:181411:181411 [0] NCCL INFO ncclCommInitRank comm 0x5584f0195160 rank 8 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x45a3a89de169ea18 - Init COMPLETE
tpgds-aihub0007:177787:177787 [0] NCCL INFO AllReduce: 4 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..0}
tpgds-aihub0007:177789:177789 [2] NCCL INFO NCCL_IB_HCA set to mlx5_0,mlx5_1,mlx5_2,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_11
[2026-03-03 12:11:38] tpgds-aihub0007:185303:186751 [1] transport/net_ib.cc:2453 NCCL WARN NET/IB: Got completion from peer 10.99.91.63<51161> with status=4 opcode=32614 len=32614 vendor err 81 (Send) localGid ::ffff:10.99.92.59 remoteGids::ffff:10.99.91.63 hca mlx5_1
tpgds-aihub0007:185303:186751 [1] NCCL INFO transport/net.cc:1227 -> 6
"""

# NVIDIA/nccl-tests#213 "Nccl test seems run seperately on multi nodes" (2.2x, H800): NVLS and
# P2P/direct pointer within one host
NVLS = """\
hw14:798:815 [5] NCCL INFO Channel 14/0 : 5[5] -> 4[4] via P2P/direct pointer
hw14:798:810 [0] NCCL INFO Connected all trees
hw14:798:810 [0] NCCL INFO NVLS comm 0x55a7be5601c0 headRank 0 nHeads 8 buffSize 4194304 memSize 2097152 nvlsPerRankSize 201326592 nvlsTotalSize 1610612736
"""

# NVIDIA/nccl#447 (2.7.8 on GCP under Slurm): no IB, sockets
SLURM_SOCKET = """\
slurm-train-compute-0-0:2139:2139 [0] NCCL INFO Bootstrap : Using [0]eth0:10.0.0.34<0>
slurm-train-compute-0-0:2139:2139 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
slurm-train-compute-0-0:2139:2139 [0] NCCL INFO NET/IB : No device found.
slurm-train-compute-0-0:2139:2139 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.34<0>
slurm-train-compute-0-0:2139:2139 [0] NCCL INFO Using network Socket
NCCL version 2.7.8+cuda10.2
slurm-train-compute-0-1:2119:2119 [1] NCCL INFO Bootstrap : Using [0]eth0:10.0.0.33<0>
slurm-train-compute-0-1:2119:2119 [1] NCCL INFO NET/IB : No device found.
slurm-train-compute-0-1:2119:2119 [1] NCCL INFO Using network Socket
slurm-train-compute-0-0:2139:2250 [0] NCCL INFO Channel 00/02 :    0   1
"""
