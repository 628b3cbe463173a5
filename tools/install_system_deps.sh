#!/usr/bin/env bash
# Installs the Debian packages the GPU tests need (onnxc issue 9), idempotently.
#
# What: Mesa's lavapipe Vulkan driver (mesa-vulkan-drivers), the Vulkan loader (libvulkan1) and
# spirv-tools (spirv-val), through apt-get, only when running as root and only those missing.
# Issue 13 adds MPICH (mpich: mpirun/hydra and libmpich; libmpich-dev: mpicc and the headers, for
# building against it) for the multi-device tests under `mpirun -n 2`; mpi4py's wheel loads it.
# Why a script: these are system libraries, not Python packages, so the project's extras cannot
# carry them; README's test command calls this before pip so a fresh machine runs (not skips) the
# Vulkan tests. Not root: it changes nothing, says so, and exits 0; the GPU tests then skip with
# the reason that the Vulkan driver / spirv-val is missing.
set -u

PACKAGES="mesa-vulkan-drivers libvulkan1 spirv-tools mpich libmpich-dev"

missing=""
for p in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done

# mpi4py's wheels link the MPICH ABI's soname libmpi.so.12; Debian names MPICH's library
# libmpich.so.12 (same ABI) and ships no libmpi.so.12, so link it (root only, when missing).
link_mpich_soname() {
  local dir
  dir="$(dirname "$(readlink -f /usr/lib/*/libmpich.so.12 2>/dev/null | head -n 1)")"
  if [ -f "$dir/libmpich.so.12" ] && [ ! -e "$dir/libmpi.so.12" ] && [ "$(id -u)" = "0" ]; then
    ln -s libmpich.so.12 "$dir/libmpi.so.12" && echo "install_system_deps: linked $dir/libmpi.so.12 -> libmpich.so.12"
  fi
}

if [ -z "$missing" ]; then
  echo "install_system_deps: already installed:$(printf ' %s' $PACKAGES)"
  link_mpich_soname
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_system_deps: no apt-get; not installing:$missing (the Vulkan GPU and MPI tests will skip: no Vulkan driver/spirv-val/mpirun)"
  exit 0
fi

if [ "$(id -u)" != "0" ]; then
  echo "install_system_deps: not root; not installing:$missing (the Vulkan GPU and MPI tests will skip: no Vulkan driver/spirv-val/mpirun)"
  exit 0
fi

echo "install_system_deps: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
# Update the lists only when a plain install fails (a fresh image may have none or stale ones).
if ! apt-get install -y -q $missing >/tmp/onnxc_install_system_deps.log 2>&1; then
  apt-get update -q >>/tmp/onnxc_install_system_deps.log 2>&1
  if ! apt-get install -y -q $missing >>/tmp/onnxc_install_system_deps.log 2>&1; then
    echo "install_system_deps: apt-get failed (log: /tmp/onnxc_install_system_deps.log); the Vulkan GPU and MPI tests will skip"
    exit 0
  fi
fi
echo "install_system_deps: installed:$missing"
link_mpich_soname
