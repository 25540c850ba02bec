// The device frame path of a neural upscaler: decoded frames go to the device as their own
// planes (8–16-bit YUV, planar or semi-planar, any subsampling the converter takes), and the
// device does everything between them and the encoder's planes:
//
//   host block (pinned) ─► upload (copy stream 0) ─► YUV → RGB (src/models/torch/yuv_colour.h) ─►
//   model
//     (exec::DeviceFrameModel: the network and its resize) ─► RGB → the encoder's YUV (dithered
//     where the depth drops to 8 bits) ─► download (copy stream 1) ─► host block (pinned)
//
// No float frames on the host; the copies run on the worker's side streams while its compute
// stream runs the next slice (launch() returns as soon as the slice is queued). On the CPU the
// same steps run synchronously with plain host memory (how CI tests the path).
//
// Host memory: input blocks hold one slice's packed frames (src/base/yuv_format.h, yuv_layout);
// `tokens` of them at most (input_block() waits for one whose upload is done). Output blocks
// come from a pool that grows as the encoder holds on to frames (a frame keeps its block
// alive), never past what is in flight.
//
// Threading: input_block() from any thread (the reader's); launch() on the worker's thread
// (DeviceWorker::call/submit: its device and compute stream current); a LaunchedSlice from any
// one thread. The path outlives its slices' waits; blocks may outlive the path.
//
// Torch-free header: the scheduler reaches the LibTorch side (frame_path_device.cpp) through
// torch_side.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "src/base/yuv_format.h"
#include "src/model.h"

namespace wm::exec {
class DeviceContext;
}

namespace wm::parallel {

struct FramePathConfig {
  YuvFormat input;       // the decoded frames' planes
  YuvFormat output;      // the encoder's planes, at the model's output size
  int slice_frames = 4;  // frames per launch, at most
  int tokens = 3;        // input blocks (slices being filled or uploaded)
  bool dither = true;    // ordered dither where the output has fewer than 10 bits
  // Where the model's output size exceeds the encoder's (an encoder that needs even sizes crops
  // the last column/row), the top-left part is converted. 0: the output format's size.
  int model_width = 0;
  int model_height = 0;
};

// Row alignment of the packed layouts: input blocks are packed (the reader copies rows in),
// output blocks have rows aligned for the encoder's SIMD.
constexpr size_t kInputRowAlign = 2;
constexpr size_t kOutputRowAlign = 64;

// One slice's frames in host memory (pinned for a GPU), packed in `layout`.
struct HostBlock {
  uint8_t* data = nullptr;
  YuvLayout layout;
  int capacity = 0;  // frames it can hold
  int frames = 0;    // frames it holds
  uint8_t* frame(int i) const { return data + size_t(i) * layout.frame_bytes; }
  // Set by launch(): waits until the block's upload is done (input_block() calls it before
  // handing the block out again).
  std::function<void()> wait_reuse;
};

// GPU seconds of one slice's steps, from events on the device (host seconds on the CPU).
struct SliceTimes {
  double upload = 0;
  double convert = 0;  // YUV → RGB
  double model = 0;
  double convert_back = 0;  // RGB → the encoder's YUV
  double download = 0;
};

// A launched slice. `output` holds its frames (as many as the input had) once wait() has
// returned; wait() throws what the device hit. times() is valid after wait().
class LaunchedSlice {
 public:
  virtual ~LaunchedSlice() = default;
  virtual void wait() = 0;
  virtual SliceTimes times() const = 0;
  std::shared_ptr<HostBlock> output;
};

class FramePath {
 public:
  virtual ~FramePath() = default;
  // A block for one slice's input frames (frames = 0); waits while all `tokens` are in use.
  virtual std::shared_ptr<HostBlock> input_block() = 0;
  // On the worker's thread: queues the slice (upload, conversions, model, download) and returns.
  // `input` may be reused once its wait_reuse() returns. Throws ModelError (a failure to
  // launch; out-of-memory splits the slice's calls first, as `tiling: auto` does).
  virtual std::unique_ptr<LaunchedSlice> launch(std::shared_ptr<HostBlock> input,
                                                exec::DeviceContext& context) = 0;
};

// The path for `model` (ModelTraits::device_frames) on `device`. Throws wm::Error when the model
// cannot take frames on its device or the formats cannot be converted.
std::unique_ptr<FramePath> make_frame_path(const Model& model, const Device& device,
                                           const FramePathConfig& config);

}  // namespace wm::parallel
