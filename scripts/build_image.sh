#!/usr/bin/env bash
# Build the training image (images/training/Dockerfile) here, without a Docker engine, once, and print its name.
#
# Debian's podman, buildah, runc and debootstrap (installed through apt_install.sh when missing): a Debian bookworm
# base made by debootstrap from the Debian mirror apt already uses, imported as a local image, then `buildah bud`
# of the Dockerfile on it. The image is named by a hash of what decides its content: the Dockerfile, every file
# of its build context (what Dockerfile.dockerignore lets through: the lock, scripts/build_horovod.sh, the package)
# and the base's recipe; an image of that name is reused, any other airflow-ml-training tag removed. Buildah's
# layer cache makes a change of the package alone rebuild its last steps only.
#
# On the build's way out, not in the image: the host's CA bundle (package downloads may pass a TLS-intercepting
# proxy) at /run/host-ca.crt, the Horovod wheel cache of scripts/build_horovod.sh (a wheel for these exact
# versions is installed, else Horovod compiles and the wheel lands in the cache), uv's download cache, and the
# machine's CPU torch wheels (/opt/wheels) when it has them.
#
# Usage: scripts/build_image.sh           build when absent; prints the image's name (the only line on stdout)
#        scripts/build_image.sh --name    print the name the current sources give, build nothing
# Without root (or sudo) to install the tools it says so and prints nothing: the image tests skip.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dockerfile="$repo/images/training/Dockerfile"
ignore="$repo/images/training/Dockerfile.dockerignore"
export CONTAINERS_CONF="$repo/images/podman/containers.conf"
runtime=/usr/sbin/runc
cache_root=${AIRFLOW_ML_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-ml-provider}
uv_cache=${UV_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uv}
ca_bundle=${AIRFLOW_ML_BUILD_CA:-/etc/ssl/certs/ca-certificates.crt}
# The mirror and suite of the base: the first Debian "deb" source apt uses (deb822 or one-line format).
mirror=${AIRFLOW_ML_DEBIAN_MIRROR:-$(awk '/^Types:/ {deb = ($0 ~ /(^| )deb( |$)/)} deb && /^URIs:/ {print $2; exit}
    /^deb / && $0 ~ /debian/ {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' \
    $(compgen -G '/etc/apt/sources.list.d/*.sources') $(compgen -G /etc/apt/sources.list) </dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}
suite=bookworm

# The build context: exactly what the ignore file lets through ("*" then "!path" lines), without caches.
stage_context() {
    local dest=$1 path
    while read -r path; do
        [[ $path == '!'* ]] || continue
        path=${path#!}
        mkdir -p "$dest/$(dirname "$path")"
        cp -a "$repo/$path" "$dest/$path"
    done < "$ignore"
    find "$dest" -name __pycache__ -prune -exec rm -rf {} +
    find "$dest" -name '*.pyc' -delete
}

base_recipe="debootstrap --variant=minbase $suite $mirror"
base="localhost/airflow-ml-bookworm-base:$(printf '%s\n' "$base_recipe" | sha256sum | cut -c1-12)"

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
stage_context "$context/ctx"
digest=$( (printf '%s\n' "$base"; cat "$dockerfile";
           cd "$context/ctx" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16)
image="localhost/airflow-ml-training:$digest"
if [[ ${1:-} == --name ]]; then
    echo "$image"
    exit 0
fi

if ! command -v podman >/dev/null || ! command -v buildah >/dev/null || ! [ -x "$runtime" ] \
        || ! command -v debootstrap >/dev/null; then
    "$repo/scripts/apt_install.sh" "the training image" podman buildah runc debootstrap >&2
    command -v buildah >/dev/null || exit 0
fi

if podman image exists "$image"; then
    echo "$image"
    exit 0
fi

if ! podman image exists "$base"; then
    echo "build_image: making the base $base ($base_recipe)" >&2
    start=$SECONDS
    root="$context/rootfs"
    debootstrap --variant=minbase "$suite" "$root" "$mirror" >&2
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | podman import --quiet - "$base" >/dev/null
    rm -rf "$root"
    echo "build_image: base made in $((SECONDS - start)) s" >&2
fi

volumes=()
args=(--build-arg "BASE_IMAGE=$base")
if [[ -f $ca_bundle ]]; then
    volumes+=(-v "$ca_bundle:/run/host-ca.crt:ro")
    args+=(--build-arg PIP_CERT=/run/host-ca.crt --build-arg SSL_CERT_FILE=/run/host-ca.crt
           --build-arg UV_SYSTEM_CERTS=1)
fi
mkdir -p "$cache_root" "$uv_cache"
volumes+=(-v "$cache_root:/run/airflow-ml-cache" -v "$uv_cache:/run/uv-cache")
args+=(--build-arg HOROVOD_CACHE=/run/airflow-ml-cache --build-arg UV_CACHE_DIR=/run/uv-cache)
torch_wheels=${TORCH_WHEELS:-}
if [[ -z $torch_wheels && -n $(compgen -G '/opt/wheels/torch-*+cpu-*.whl') ]]; then
    torch_wheels=/opt/wheels
fi
if [[ -d $torch_wheels ]]; then
    volumes+=(-v "$torch_wheels:/run/torch-wheels:ro")
    args+=(--build-arg TORCH_WHEELS=/run/torch-wheels)
elif [[ -n $torch_wheels ]]; then
    args+=(--build-arg "TORCH_WHEELS=$torch_wheels")
fi

echo "build_image: building $image from images/training/Dockerfile (cold: several minutes)" >&2
start=$SECONDS
# --uts host: a RUN step's own hostname resolves (the host's /etc/hosts names it); under buildah's own UTS
# namespace it did not, and Horovod's Gloo device (build_horovod.sh's hvd.init check) aborted; --add-host in case
# the host's /etc/hosts does not name it.
buildah --runtime "$runtime" bud --network host --uts host --add-host "$(hostname):127.0.0.1" --layers --pull=false -f "$dockerfile" -t "$image" \
    "${volumes[@]}" "${args[@]}" "$context/ctx" >&2
echo "build_image: built in $((SECONDS - start)) s" >&2
# Older builds of this image: their tags go (their layers stay in buildah's cache while a newer build shares them),
# except one a container still runs (no --force): another checkout's tests on this machine may be using it.
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/airflow-ml-training:' || true); do
    [[ $old == "$image" ]] || podman rmi "$old" >/dev/null 2>&1 || true
done
echo "$image"
