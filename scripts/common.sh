# Shared by scripts/demo.sh and scripts/test.sh: install what is missing, then build.
# Idempotent: packages already installed are not touched, and an up-to-date build is a no-op.

WM_PACKAGES=(
  g++ cmake ninja-build pkg-config ccache
  libtorch-dev
  libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev libavfilter-dev
  ffmpeg
  libtbb-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libsqlite3-dev libgtest-dev libgmock-dev
  chromium
)
# scripts/fuzz.sh and scripts/sanitize.sh (CI runs both): clang with libFuzzer and the sanitizer
# runtimes (libclang-rt-14-dev); llvm for llvm-symbolizer (source lines in the reports).
WM_FUZZ_PACKAGES=(clang libclang-rt-14-dev llvm)

wm_install() {
  local missing=()
  for pkg in "${WM_PACKAGES[@]}" "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

wm_build() {
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  cmake --build "$root/build" -j"$(nproc)"
}
