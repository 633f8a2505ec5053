#!/usr/bin/env bash
# Debian's openssh-server and openssh-client, which the training image has (images/training/Dockerfile):
# the rendered MPIJob and Volcano Horovod jobs (tests/integration/kubernetes/test_rendered_jobs_run.py)
# run their workers' `/usr/sbin/sshd -De` and the launcher's ssh. Idempotent: does nothing when both are
# there. Needs root (as CI has) or sudo; without either it says so and leaves those tests to skip.
# The tests never use a system sshd: they start the image's command in each pod's own namespaces.
set -euo pipefail
if [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
else
    echo "install_sshd: not root and no sudo: the rendered Horovod job tests will be skipped" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq openssh-server openssh-client >/dev/null
/usr/sbin/sshd -V 2>&1 | head -1 || true
