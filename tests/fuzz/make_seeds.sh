#!/usr/bin/env bash
# Regenerates the seed corpora of tests/fuzz/corpus/{video_reader,safetensors,torch_pickle,
# image_header} (the job_spec seeds are the repository's job examples). The seeds are committed;
# this script documents how they were made. Needs ffmpeg (with libx264, libx265, libvpx) and python3.
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

# torch_pickle: a whole torch.save file (its zip, storages and pickle), and pickles alone (the
# harness wraps them into a checkpoint whose storages "0".."3" hold 32 KiB each) written the way
# torch.save writes them (protocol 2, and 4 with FRAME/MEMOIZE/STACK_GLOBAL), without torch.
t=torch_pickle
mkdir -p "$t"
cp ../../data/golden/upscalers/srvgg-x2-tiny/model.pth "$t/srvgg-x2-tiny.pth"
python3 - "$t" <<'PY'
import collections, io, pickle, sys, types

out = sys.argv[1]
torch = types.ModuleType("torch")
utils = types.ModuleType("torch._utils")
class FloatStorage: pass
class HalfStorage: pass
FloatStorage.__module__ = HalfStorage.__module__ = "torch"
torch.FloatStorage, torch.HalfStorage = FloatStorage, HalfStorage
def _rebuild_tensor_v2(*args): pass
def _rebuild_parameter(*args): pass
_rebuild_tensor_v2.__module__ = _rebuild_parameter.__module__ = "torch._utils"
utils._rebuild_tensor_v2, utils._rebuild_parameter = _rebuild_tensor_v2, _rebuild_parameter
sys.modules.update({"torch": torch, "torch._utils": utils})

class Storage:
    def __init__(self, key, cls, numel): self.key, self.cls, self.numel = key, cls, numel
class Tensor:
    def __init__(self, storage, offset, size, stride, parameter=False):
        self.args = (storage, offset, size, stride, False, collections.OrderedDict())
        self.parameter = parameter
    def __reduce__(self):
        t = Tensor.__new__(Tensor)
        t.args, t.parameter = self.args, False
        return (_rebuild_parameter, (t, False, collections.OrderedDict())) if self.parameter \
            else (_rebuild_tensor_v2, self.args)

class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.cls, obj.key, "cpu", obj.numel)
        return None

def write(name, obj, protocol):
    buf = io.BytesIO()
    Pickler(buf, protocol=protocol).dump(obj)
    with open(f"{out}/{name}", "wb") as f:
        f.write(buf.getvalue())

s0, s1 = Storage("0", FloatStorage, 64), Storage("1", HalfStorage, 128)
inner = collections.OrderedDict()
inner["body.0.weight"] = Tensor(s0, 0, (4, 2, 3, 3), (18, 9, 3, 1))
inner["body.0.bias"] = Tensor(s0, 60, (4,), (1,), parameter=True)
inner["body.1.weight"] = Tensor(s1, 4, (2, 8), (1, 2))       # not contiguous
inner["shared"] = inner["body.0.bias"]                       # a memo reference
inner._metadata = collections.OrderedDict([("", {"version": 1})])
write("params_ema_p2.pkl", {"params_ema": inner, "step": 7, "lr": 1e-4, "name": "x"}, 2)
write("params_p4.pkl", {"params": inner, "epochs": [1, 2, (3, None)], "ok": True}, 4)
PY

# image_header: one picture each, in the formats libav's image decoders give wmbatch: 8/16-bit
# RGB, alpha, gray, a palette (with and without transparency), JPEG with an EXIF orientation,
# TIFF, BMP, and a PNG declaring 100000x100000 pixels (beyond libav's limit).
i=image_header
mkdir -p "$i"
one() { ff -f lavfi -i "$(src 16x16 1 1)" -frames:v 1 "$@"; }
one -pix_fmt rgb24 "$i/rgb24.png"
one -pix_fmt rgba64be "$i/rgba64.png"
one -pix_fmt gray16be "$i/gray16.png"
one -pix_fmt ya8 "$i/gray_alpha.png"
one -pix_fmt yuvj444p "$i/yuv444.jpg"
one -pix_fmt yuvj422p "$i/yuv422.jpg"
one -pix_fmt rgb48le "$i/rgb48.tif"
one -pix_fmt bgr24 "$i/bgr24.bmp"
ff -f lavfi -i "testsrc2=s=16x16:r=1:d=1" \
  -vf "split[a][b];[a]palettegen=max_colors=16:reserve_transparent=0[p];[b][p]paletteuse" \
  -frames:v 1 "$i/pal8.png"
ff -f lavfi -i "testsrc2=s=16x16:r=1:d=1,format=rgba,geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':a='if(lt(X,8),0,255)'" \
  -vf "split[a][b];[a]palettegen=max_colors=16:reserve_transparent=1[p];[b][p]paletteuse" \
  -frames:v 1 "$i/pal8_transparent.png"
one -pix_fmt yuvj420p -s 16x8 "$i/base.jpg"
python3 - "$i" <<'PY'
import struct, sys, zlib
out = sys.argv[1]
# EXIF orientation 6 (turn 90 degrees clockwise to show): an APP1 segment after SOI.
jpeg = open(f"{out}/base.jpg", "rb").read()
tiff = b"II*\x00" + struct.pack("<IH", 8, 1) + struct.pack("<HHIHH", 0x0112, 3, 1, 6, 0) + \
    struct.pack("<I", 0)
app1 = b"Exif\x00\x00" + tiff
open(f"{out}/exif_orientation6.jpg", "wb").write(
    jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(app1) + 2) + app1 + jpeg[2:])
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0))
png += chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")
open(f"{out}/declares_100000x100000.png", "wb").write(png)
PY
rm "$i/base.jpg"
