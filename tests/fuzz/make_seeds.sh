#!/usr/bin/env bash
# Regenerates the seed corpora of tests/fuzz/corpus/{video_reader,safetensors} (the job_spec seeds
# are the repository's job examples). The seeds are committed; this script documents how they
# were made. Needs ffmpeg (with libx264, libx265, libvpx) and python3.
set -euo pipefail
cd "$(dirname "$0")/corpus"

v=video_reader
mkdir -p "$v"
ff() { ffmpeg -hide_banner -loglevel error -y "$@"; }
src() { echo "testsrc2=s=$1:r=$2:d=$3"; }
ff -f lavfi -i "$(src 32x32 10 0.4)" -c:v libx264 -preset ultrafast -g 2 -bf 1 "$v/h264.mp4"
ff -f lavfi -i "$(src 32x32 10 0.4)" -c:v libx264 -preset ultrafast -movflags +faststart \
  "$v/faststart.mp4"
head -c 1500 "$v/faststart.mp4" > "$v/truncated.mp4"  # cut inside the frames
rm "$v/faststart.mp4"
ff -f lavfi -i "$(src 32x32 10 0.4)" -f lavfi -i sine=d=0.4:r=8000 -c:v libx264 \
  -preset ultrafast -c:a aac -b:a 8k -shortest -metadata:s:v:0 rotate=90 "$v/h264_aac_rot.mov"
ff -f lavfi -i "$(src 32x32 10 0.3)" -c:v libx265 -preset ultrafast -pix_fmt yuv420p10le \
  -x265-params log-level=none "$v/hevc10.mkv"
ff -f lavfi -i "$(src 16x16 10 0.3)" -c:v ffv1 -pix_fmt yuv444p "$v/ffv1.mkv"
ff -f lavfi -i "$(src 16x16 10 0.3)" -c:v mjpeg "$v/mjpeg.avi"
ff -f lavfi -i "$(src 32x32 25 0.4)" -c:v mpeg2video "$v/mpeg2.ts"
ff -f lavfi -i "$(src 32x32 10 0.3)" -c:v libvpx-vp9 -deadline realtime "$v/vp9.webm"
ff -f lavfi -i "$(src 16x16 10 0.3)" -pix_fmt yuv420p "$v/raw.y4m"
ff -f lavfi -i "$(src 16x16 10 0.3)" "$v/anim.gif"
ff -f lavfi -i "$(src 16x16 1 1)" -frames:v 1 -pix_fmt rgba64be "$v/image.png"
ff -f lavfi -i "$(src 16x16 10 0.2)" -c:v prores_ks -profile:v 4 -pix_fmt yuva444p10le \
  "$v/prores.mov"
ff -f lavfi -i "$(src 16x16 10 0.3)" -c:v mpeg4 -fps_mode vfr \
  -vf "setpts='if(eq(N,1),PTS+0.05/TB,PTS)'" "$v/vfr.mkv"

mkdir -p safetensors
python3 - <<'PY'
import json, struct

def write(name, tensors, metadata=None, pad=True):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for tname, dtype, shape, payload in tensors:
        header[tname] = {"dtype": dtype, "shape": shape,
                         "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    with open("safetensors/" + name, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)

write("latent.safetensors",
      [("latent", "F32", [1, 2, 1, 2], struct.pack("<4f", 0.5, -1.0, 2.0, 0.25))],
      {"fps": "16", "format": "pt"})
write("dtypes.safetensors",
      [("a", "BF16", [3], b"\x80\x3f" * 3), ("b", "F16", [2, 1], b"\x00\x3c" * 2),
       ("c", "I64", [], struct.pack("<q", -7)), ("d", "U8", [0], b""),
       ("e", "BOOL", [2], b"\x01\x00"), ("f", "F8_E4M3", [1], b"\x38"),
       ("g", "F64", [1], struct.pack("<d", 3.5))], pad=False)
write("empty.safetensors", [])
PY
