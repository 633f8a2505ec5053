#!/usr/bin/env bash
# Build Horovod for the training environment once and install it from a wheel cached by version.
#
# Horovod 0.28.1 is the last release and ships only as a source distribution. Against
# TensorFlow >= 2.16 on a CPU build its XLA ops do not compile (they need GPU headers), so they are
# compiled only for GPU builds: upstream's own guard, extended with `&& HAVE_GPU`.
# PyTorch is not built (the training image is TensorFlow-only), so upstream's C++17-for-torch fix
# (#3998) is not needed. The wheel is only valid for the exact Horovod/TensorFlow/Python it was
# built against, and for this script's patch: all of them key the cache.
#
# Usage: scripts/build_horovod.sh TRAINING_VENV
set -euo pipefail

venv=${1:?usage: build_horovod.sh TRAINING_VENV}
py="$venv/bin/python"
hvd_version=0.28.1
cache_root=${AIRFLOW_ML_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-ml-provider}

# tensorflow-cpu in the CPU environment; tensorflow[and-cuda] in a GPU image (images/training/Dockerfile)
tf_version=$("$py" -c 'import importlib.metadata as m, sys
for dist in ("tensorflow-cpu", "tensorflow"):
    try:
        sys.exit(print(m.version(dist)))
    except m.PackageNotFoundError:
        pass
sys.exit("build_horovod: TensorFlow is not installed")')
py_version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# What decides the wheel's content besides the versions: the source patch and the build flags.
patch_expr='s/^#if TENSORFLOW_VERSION >= 2006000000$/#if TENSORFLOW_VERSION >= 2006000000 \&\& HAVE_GPU/'
build_env=(HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_MXNET=1
           HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_CPU_OPERATIONS=gloo)
# A GPU image sets HOROVOD_GPU_OPERATIONS=NCCL (allreduce on the GPUs); it keys the cache like every flag.
if [[ -n "${HOROVOD_GPU_OPERATIONS:-}" ]]; then
    build_env+=(HOROVOD_GPU_OPERATIONS="$HOROVOD_GPU_OPERATIONS")
fi
recipe_hash=$(printf '%s\n' "$patch_expr" "${build_env[@]}" | sha256sum | cut -c1-12)
wheel_dir="$cache_root/horovod/$hvd_version-tf$tf_version-py$py_version-$recipe_hash"

if ! compgen -G "$wheel_dir/horovod-*.whl" >/dev/null; then
    echo "build_horovod: no cached wheel in $wheel_dir; building Horovod $hvd_version (takes minutes)"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$py" -m pip download --quiet --no-deps --no-binary :all: -d "$work" "horovod==$hvd_version"
    tar xzf "$work/horovod-$hvd_version.tar.gz" -C "$work"
    src="$work/horovod-$hvd_version"
    sed -i "$patch_expr" "$src/horovod/tensorflow/xla_mpi_ops.cc"
    grep -q '2006000000 && HAVE_GPU' "$src/horovod/tensorflow/xla_mpi_ops.cc"
    env "${build_env[@]}" MAKEFLAGS="-j$(nproc)" \
        "$py" -m pip wheel --no-build-isolation --no-deps -w "$work/wheel" "$src"
    mkdir -p "$(dirname "$wheel_dir")"
    rm -rf "$wheel_dir.partial" && mv "$work/wheel" "$wheel_dir.partial" && mv "$wheel_dir.partial" "$wheel_dir"
fi
"$py" -m pip install --quiet --no-deps --force-reinstall "$wheel_dir"/horovod-*.whl
# --check-build can list extensions that were not built: load the TensorFlow op library instead.
"$py" -c 'import horovod, horovod.tensorflow as hvd; assert hvd.gloo_built(); hvd.init(); print("horovod", horovod.__version__, "with TensorFlow ops and Gloo: ok")'
