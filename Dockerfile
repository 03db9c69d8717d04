# The image `allreduce-bench k8s` manifests run (doc/cluster.md#kubernetes): PyTorch with CUDA and
# NCCL, the project, and sshd + Open MPI for MPIJob's launcher and workers. Not built in this
# repository's CI (no container runtime there). From the repository's root:
#   docker build -t REGISTRY/allreduce-bench:TAG . && docker push REGISTRY/allreduce-bench:TAG
# The base is the one Kubeflow Trainer's torch-distributed runtime names (v2.3.0), with the torch
# this project pins.
FROM pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime

# As mpi-operator's build/base/Dockerfile: sshd's privilege-separation directory, no host-key
# prompt and no known_hosts file (the operator mounts ~/.ssh from a Secret, read-only), no
# permission checks on that mount.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openssh-server openssh-client openmpi-bin \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /run/sshd && ssh-keygen -A \
    && sed -i "s/[ #]\(.*StrictHostKeyChecking \).*/ \1no/g" /etc/ssh/ssh_config \
    && echo "    UserKnownHostsFile /dev/null" >> /etc/ssh/ssh_config \
    && sed -i "s/#\(StrictModes \).*/\1no/g" /etc/ssh/sshd_config

# The manifests mount the results volume at /workspace/results: `results/<stamp>` lands there.
WORKDIR /workspace
COPY setup.py setup.cfg README.md ./
COPY allreduce_bench ./allreduce_bench
RUN pip install --no-cache-dir . && allreduce-bench --version
