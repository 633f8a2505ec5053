#!/usr/bin/env bash
# Build a real kube-apiserver (and install etcd) for the Kubernetes backend tests, cached by version.
#
# Nothing prebuilt is installable here: the binary is built from Debian's `kubernetes` source package
# (Kubernetes 1.20.2, every Go dependency vendored), offline, with Debian's Go 1.19. The vendored
# modern-go/reflect2 1.0.1 crashes under Go >= 1.18 on the first custom-object create, so it is
# replaced with Debian's reflect2 1.0.2. Prints the binary's path on its last line.
set -euo pipefail

pkg_version=1.20.5+really1.20.2-1.1+deb12u1
cache_root=${AIRFLOW_ML_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-ml-provider}
recipe_hash=$(printf '%s\n' "$pkg_version" reflect2-from-debian CGO_ENABLED=0 | sha256sum | cut -c1-12)
bin_dir="$cache_root/kube-apiserver/$pkg_version-$recipe_hash"

apt_install() {
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    if ((${#missing[@]})); then
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
    fi
}

apt_install etcd-server
if [[ ! -x "$bin_dir/kube-apiserver" ]]; then
    echo "build_kube_apiserver: building kube-apiserver from Debian's kubernetes $pkg_version (takes ~15 min)" >&2
    if ! grep -rqs '^Types: deb-src' /etc/apt/sources.list.d/; then
        sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
            > /etc/apt/sources.list.d/debian-src.sources
        apt-get update -qq >&2
    fi
    apt_install golang-1.19-go rsync jq dpkg-dev golang-github-modern-go-reflect2-dev
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && apt-get source -qq "kubernetes=$pkg_version" >&2)
    src=$(find "$work" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -n1)
    rm -rf "$src/vendor/github.com/modern-go/reflect2"
    cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$src/vendor/github.com/modern-go/reflect2"
    (cd "$src" && PATH="/usr/lib/go-1.19/bin:$PATH" GOPROXY=off GOFLAGS=-mod=vendor CGO_ENABLED=0 \
        KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_TREE_STATE=clean make WHAT=cmd/kube-apiserver >&2)
    mkdir -p "$bin_dir.partial"
    cp "$(find "$src/_output" -type f -name kube-apiserver | head -n1)" "$bin_dir.partial/"
    rm -rf "$bin_dir" && mv "$bin_dir.partial" "$bin_dir"
fi
"$bin_dir/kube-apiserver" --version >&2
echo "$bin_dir/kube-apiserver"
