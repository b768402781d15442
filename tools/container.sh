#!/usr/bin/env bash
# `make container`: the CPU step environment as a real image, built here from the repository's own
# definition (containers/Containerfile), as root:
#   1. a bookworm base root file system with mmdebstrap (python3, python3-venv), imported into
#      podman as localhost/repro-base:bookworm (no image registry is reachable from CI; with one,
#      BASE=docker.io/library/debian:bookworm skips this step);
#   2. podman build -f containers/Containerfile -> localhost/repro-cpu (torch 2.13.0 CPU from the
#      machine's wheel folder TORCH_WHEELS=/opt/wheels, else from the CPU index; the rest pinned by
#      containers/constraints.txt, from PyPI);
#   3. exported: OUT/repro-cpu.oci.tar (OCI archive, layers uncompressed unless OCI_GZIP=1), and OUT/../containers/repro-cpu.sif
#      (containers/repro-cpu.sif, the path the workflow's `container:` directives name): the image's
#      file system as squashfs in a SIF made with siftool, for `snakemake --sdm apptainer`.
# OUT defaults to results/container. Installs podman, runc, mmdebstrap, squashfs-tools and siftool
# (Debian packages) if missing. Nothing is cached between runs but podman's own image store.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/results/container}
BASE=${BASE:-}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
TORCH_WHEELS=${TORCH_WHEELS:-/opt/wheels}
IMAGE=localhost/repro-cpu:latest
SIF=$ROOT/containers/repro-cpu.sif

log() { echo "container: $* ($(date -u +%T))"; }
die() { echo "container: $*" >&2; exit 1; }

[[ $EUID -eq 0 ]] || die "run as root (rootful podman, mmdebstrap)"
need=()
for p in podman runc mmdebstrap squashfs-tools siftool; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
done
if ((${#need[@]})); then
    log "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p "$OUT"
work=$(mktemp -d "${TMPDIR:-/tmp}/repro-container.XXXXXX")
trap 'rm -rf "$work"' EXIT
# podman's settings for this build (CONTAINERS_CONF; the machine's own containers.conf is left
# alone): rootful podman here needs runc, and ulimits within this shell's hard limits (its defaults
# ask for more open files than the sandbox allows: runc then fails "setting rlimit type 7"; nproc
# above 32768 failed the same way here, "type 6", even below the shell's hard limit)
nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
[[ $nofile == unlimited || $nofile -gt 65536 ]] && nofile=65536
[[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
cat > "$OUT/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF=$OUT/containers.conf  # tests/real run the image with it too

if [[ -z $BASE ]]; then
    log "base: mmdebstrap bookworm from $MIRROR"
    mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
        --aptopt='APT::Install-Recommends "false"' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
        bookworm "$work/base.tar" "$MIRROR"
    podman import --quiet "$work/base.tar" localhost/repro-base:bookworm >/dev/null
    rm -f "$work/base.tar"
    BASE=localhost/repro-base:bookworm
fi

log "build $IMAGE from containers/Containerfile (base $BASE)"
mounts=(--volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
[[ -d $TORCH_WHEELS ]] && mounts+=(--volume "$TORCH_WHEELS:/wheels:ro")
# outbound HTTPS (PyPI) from the build trusts the host's CA bundle, mounted above
podman build --quiet --network host --build-arg "BASE=$BASE" "${mounts[@]}" \
    --env PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    -f "$ROOT/containers/Containerfile" -t "$IMAGE" "$ROOT" >/dev/null

log "built; export $OUT/repro-cpu.oci.tar"
rm -f "$OUT/repro-cpu.oci.tar"
# layers as podman stores them, uncompressed (2.1 GB; gzip made it 0.6 GB but took 6.7 min of the
# build on a loaded 2-core machine, against 44 s): OCI_GZIP=1 compresses, for shipping the archive
if [[ ${OCI_GZIP:-0} == 1 ]]; then
    podman save --quiet --format oci-archive -o "$OUT/repro-cpu.oci.tar" "$IMAGE"
else
    podman save --quiet --uncompressed --format oci-archive -o "$OUT/repro-cpu.oci.tar" "$IMAGE"
fi

log "SIF $SIF"
cid=$(podman create "$IMAGE")
mkdir "$work/rootfs"
podman export "$cid" | tar -C "$work/rootfs" -xf -
podman rm "$cid" >/dev/null
# what Apptainer reads from an image it did not build itself: the environment and the runscript
mkdir -p "$work/rootfs/.singularity.d/env" "$work/rootfs/.singularity.d/libs"
cat > "$work/rootfs/.singularity.d/env/90-environment.sh" <<'EOF'
#!/bin/sh
export PATH="/opt/venv/bin:$PATH" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
# each job runs from the checkout: its src/ comes before the copy installed in the image
export PYTHONPATH="${PWD}/src${PYTHONPATH:+:$PYTHONPATH}"
EOF
printf '#!/bin/sh\nexec python "$@"\n' > "$work/rootfs/.singularity.d/runscript"
chmod 755 "$work/rootfs/.singularity.d/env/90-environment.sh" "$work/rootfs/.singularity.d/runscript"
ln -sf .singularity.d/runscript "$work/rootfs/singularity"
mksquashfs "$work/rootfs" "$work/rootfs.squashfs" -quiet -noappend -comp gzip -Xcompression-level 1 -processors "$(nproc)" >/dev/null
rm -f "$SIF"
siftool new "$SIF"
siftool add "$SIF" "$work/rootfs.squashfs" --datatype 4 --parttype 2 --partfs 1 --partarch 2
log "done: $(du -h "$OUT/repro-cpu.oci.tar" | cut -f1) OCI archive, $(du -h "$SIF" | cut -f1) SIF"
