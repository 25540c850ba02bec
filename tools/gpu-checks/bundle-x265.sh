#!/usr/bin/env bash
# The GPU host's dependency bundle with libx265: ../shared/gpu-host/wm-deps.tar.xz has FFmpeg
# built without it, so the libx265 rows of issue 24 (docs/performance.md) cannot run there. This
# rebuilds FFmpeg 5.1 from Debian 12's source package with the bundle's configure line plus
# --enable-libx265, puts its libraries and Debian's libx265-199 and libnuma1 into a copy of the
# bundle, drops the duplicate codec libraries (the copies under lib/ are the ones found), and
# packs it again under the 64 MiB the device tool carries with the checkout (~10.6 MB).
# Runs as root on Debian 12 with network to Debian's archive; ~15 min on 2 cores. Stages under
# WORK (default /tmp/wm-x265-bundle); this machine's /opt is left alone.
# Usage: tools/gpu-checks/bundle-x265.sh IN_BUNDLE OUT_BUNDLE
#   e.g. tools/gpu-checks/bundle-x265.sh ../shared/gpu-host/wm-deps.tar.xz .deps/wm-deps.tar.xz
set -euo pipefail
in=$(readlink -f "${1:?input bundle}")
out=$(readlink -m "${2:?output bundle}")
work=${WORK:-/tmp/wm-x265-bundle}
prefix=/opt/wm-deps
stage=$work/stage
mkdir -p "$work"
cd "$work"
src_list=/etc/apt/sources.list.d/wm-x265-src.sources
cat >"$src_list" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
trap 'rm -f "$src_list"' EXIT
apt-get update -q >/dev/null
apt-get install -y -q libffmpeg-nvenc-dev libx264-dev libx265-dev libdav1d-dev nasm pkg-config \
  dpkg-dev >/dev/null
if [ ! -d ffmpeg-src ]; then
  mkdir ffmpeg-src
  (cd ffmpeg-src && apt-get source --download-only ffmpeg >/dev/null && tar xf ffmpeg_*.orig.tar.xz)
fi
cd ffmpeg-src/ffmpeg-*/
./configure --prefix=$prefix --enable-shared --disable-static --disable-programs --disable-doc \
  --disable-debug --enable-gpl --enable-libx264 --enable-libx265 --enable-libdav1d \
  --enable-ffnvcodec --enable-nvenc --enable-nvdec --enable-cuvid --disable-avdevice \
  --disable-postproc --disable-network --disable-encoders \
  --enable-encoder=libx264,libx265,ffv1,prores_ks,png,rawvideo,mjpeg,aac,flac,pcm_s16le,pcm_s24le,h264_nvenc,hevc_nvenc,av1_nvenc,mpeg4 \
  --extra-ldflags='-Wl,-rpath,\$$ORIGIN' >/dev/null
make -j"$(nproc)" >/dev/null
rm -rf "$stage" && mkdir -p "$stage"
tar -C "$stage" -xJf "$in"
rm -f "$stage$prefix"/lib/libav*.so* "$stage$prefix"/lib/libsw*.so*
make install DESTDIR="$stage" >/dev/null
cd "$work"
rm -f ./*.deb
apt-get download libx265-199 libnuma1 >/dev/null 2>&1
for d in ./*.deb; do dpkg -x "$d" "$stage$prefix"; done
lib=$stage$prefix/usr/lib/x86_64-linux-gnu
mv "$lib"/libx265.so.* "$lib"/libnuma.so.* "$stage$prefix/lib/"
rm -f "$lib/libsqlite3.a"
rm -rf "$stage$prefix/usr/share/doc"
XZ_OPT=-9 tar -C "$stage" -cJf "$out" "${prefix#/}"
echo "wrote $out ($(du -h "$out" | cut -f1))"
