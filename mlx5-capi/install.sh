#!/bin/sh
# Install the C library that `cargo build --release -p mlx5-capi` built, the
# way a C user links it:
#   PREFIX/lib/libmlx5r.so.VERSION   the shared library
#   PREFIX/lib/libmlx5r.so.SONAME    link: what programs load (0.MINOR before 1.0)
#   PREFIX/lib/libmlx5r.so           link: what -lmlx5r finds
#   PREFIX/lib/libmlx5_capi.so       link: the old name (-lmlx5_capi), for one release
#   PREFIX/lib/libmlx5r.a            the static library
#   PREFIX/include/mlx5r.h           the header
#   PREFIX/lib/pkgconfig/mlx5r.pc    `pkg-config --cflags --libs mlx5r`
# The .pc file's Libs carry an rpath to PREFIX/lib, so a program built with
# it starts without LD_LIBRARY_PATH.
#   mlx5-capi/install.sh PREFIX
set -eu
prefix=${1:?usage: mlx5-capi/install.sh PREFIX}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
release=${CARGO_TARGET_DIR:-$root/target}/release
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)
major=${version%%.*}
rest=${version#*.}
minor=${rest%%.*}
if [ "$major" = 0 ]; then soname="libmlx5r.so.0.$minor"; else soname="libmlx5r.so.$major"; fi
for f in libmlx5r.so libmlx5r.a; do
    [ -f "$release/$f" ] || { echo "$release/$f is missing: run cargo build --release -p mlx5-capi first" >&2; exit 1; }
done
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
prefix=$(cd "$prefix" && pwd)
install -m 755 "$release/libmlx5r.so" "$prefix/lib/libmlx5r.so.$version"
ln -sf "libmlx5r.so.$version" "$prefix/lib/$soname"
ln -sf "$soname" "$prefix/lib/libmlx5r.so"
# The library's name before it was mlx5r, like its header and symbols:
# -lmlx5_capi keeps linking for one release.
ln -sf "$soname" "$prefix/lib/libmlx5_capi.so"
install -m 644 "$release/libmlx5r.a" "$prefix/lib/libmlx5r.a"
install -m 644 "$here/include/mlx5r.h" "$prefix/include/mlx5r.h"
cat > "$prefix/lib/pkgconfig/mlx5r.pc" <<EOF
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: mlx5r
Description: C ABI of the mlx5 ring core (post, ring, poll into rings the mlx5-sim software NIC or a ConnectX executes)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lmlx5r
EOF
echo "installed mlx5r $version in $prefix"
