// SeedVR2 video VAE: the encoder and decoder networks, computing exactly
// ../shared/seedvr2-vae-spec.md §2–5 with ATen ops (any device and dtype ATen runs them on).
// Every op runs over all frames of a slice at once; the causal state between slices of one
// sequence lives in a StreamState (spec §5: each causal conv with kt > st keeps the last kt − st
// frames of its time-extended input; Upsample3D drops its duplicate head frame only in the
// sequence's first slice).
//
// Internal to src/models/ (seedvr2_vae.cpp, tests, the benchmark). A Network is immutable after
// construction and may be shared by sessions on its device; a StreamState belongs to one
// sequence (one tile of one video) and one thread at a time.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/exec/device_context.h"
#include "src/exec/halo_exchange.h"
#include "src/models/seedvr2/seedvr2_layout.h"

namespace wm::exec {
class DeviceContext;
}

namespace wm::models::seedvr2 {

struct HostCopy;  // a slot's copy between host and device in flight (seedvr2_blocks.cpp)

// Per causal conv (slot), the frames it keeps for the next slice. Slot tensors are replaced,
// never written in place (host-resident ones too), so a copy of a StreamState is a snapshot —
// unless `in_place` is set.
struct StreamState {
  std::vector<at::Tensor> memory;  // undefined: nothing seen yet
  // The caller keeps no snapshot that shares this state's device tensors: a device-resident
  // slot's new memory is written into its old tensor (no second allocation beside the conv's
  // buffer). Ignored with sequence parallelism.
  bool in_place = false;
  // Slots whose memory lives in host memory between uses (empty or 0: on the memory's device).
  // Set by the session before a call (Network::host_slots); may change between calls (a device
  // memory comes down at its next use). A host slot's memory is copied straight into the time
  // padding of its conv's input buffer when the buffer is made (CUDA: on side stream 0, so the
  // copy overlaps the norm that fills the rest of the buffer) and its new memory goes back to
  // pinned host memory on side stream 1. Only the fused path (channels-last networks) and the
  // reference path without sequence parallelism honour it.
  std::vector<char> on_host;
  // Per slot: the copy that wrote memory[slot] to the host (CUDA: its event; the next upload
  // waits for it), and the upload into a conv buffer in progress (made by conv_buffer, consumed
  // by conv_buffered).
  std::vector<std::shared_ptr<HostCopy>> written, uploading;
  // For the call in progress: the device worker, whose side streams carry the host copies (none:
  // streams from LibTorch's pool).
  exec::DeviceContext* context = nullptr;
  // Sequence parallelism (spec §5), for the current call: a ring (HaloExchange::history_from,
  // history_to). Every causal conv takes its memory from history_from() before its first call
  // of the rank's part (none: the rank keeps its own) and hands its new memory to history_to()
  // after its last call, dropping it here; only the sequence's first slice on rank 0 pads by
  // replication and drops the Upsample3D head frame (`first`). Time chunks and phases are the
  // rank's own: a chunked conv hands its memory on only after its last chunk (which holds the
  // next rank back).
  exec::HaloExchange* halo = nullptr;
  // With `halo`: per slot, whether the conv took its memory already in this call (the session
  // clears it per call), and whether the frames now running end the rank's part at their
  // stage (run_from and forward_phased keep it).
  std::vector<char> received;
  bool sends = true;
  // Encoder, within one call: per stage, the frames a temporal downsampler holds until enough
  // whole stride windows have come (Network::run_from); empty between calls.
  std::vector<std::vector<at::Tensor>> waiting;
};

// Execution choices (ModelConfig::tuning, "key=value,..."): they change rounding only, never the
// function computed.
struct Tuning {
  // Channels-last networks: GroupNorm(+SiLU) through the fused CUDA kernel (ATen elsewhere),
  // written straight into the next conv's time-padded input buffer; 1×1×1 convs as GEMMs;
  // Upsample3D unpacked into its conv's buffer. Off: the reference op sequence.
  bool fused = true;
  bool cudnn_benchmark = true;  // CUDA: let cuDNN time its algorithms per shape
  // CUDA: candidate plans cuDNN's search times per shape (0: LibTorch's 10)
  int cudnn_benchmark_limit = exec::kCudnnSearchPlans;
  int conv_frames = 0;  // CUDA: output frames per cuDNN call (0: auto, ≤ 16; -1: all)
  // Working memory per stage chunk in MiB (0: chosen from the device's memory, see
  // seedvr2_vae.cpp). Each stage runs over as many frames as fit; a stage whose input does not
  // fit runs in time chunks, each taken through all later stages before the next (exact: the
  // causal state carries between chunks as between slices).
  int64_t work_mib = 0;
  // Causal state in host memory between uses (StreamState::on_host): -1 when the state does not
  // fit the memory budget (CUDA; the lowest resolutions go first), 0 never, 1 every slot.
  int host_state = -1;
  // Device-resident causal state the automatic choice may keep, in MiB (0: from the budget).
  int64_t device_state_mib = 0;
  // Retry a slice that runs out of device memory with a smaller plan (keeps the state from
  // before the slice until it succeeds: on the device, twice the device-resident state).
  bool oom_retry = true;
  // Decoder: run the stages before the top (full-resolution) level over the whole slice first,
  // their output spooled to host memory, then the top level over the spool (Network::
  // forward_phased): each level's causal state is on the device only while its stages run.
  // -1: when the state does not fit the memory budget (CUDA: two phases, three when the top
  // level's state does not fit either, four when the lower levels' does not), 0 never, 1, 2, 3:
  // always two, three, four.
  int phased = -1;
  // Host memory the phases may hold (their spools and the parked state), in bytes (keys host_mib,
  // host_kib; 0: the host's MemAvailable when the session first decodes in phases, less an
  // eighth of it, at least 8 GiB). A slice whose phases would hold more runs them over sub-ranges
  // of its latent frames (exact, like slices).
  int64_t host_bytes = 0;
  static Tuning parse(const std::string& text);  // ModelError names a bad key or value
  std::string str() const;
};

// The parameter `key` (shape as layout() says), on the network's device and dtype.
using ParamGetter = std::function<at::Tensor(const std::string& key)>;

struct Conv;
struct Resnet;
struct Attention;
struct Upsample;
struct Stage;

class Network {
 public:
  // The decoder (decoder.* keys) or the encoder (encoder.*). `format`: the activations' layout,
  // Contiguous (the CPU's fast one) or ChannelsLast3d (cuDNN's); the params must come in it.
  Network(const Architecture& arch, bool decoder, const ParamGetter& param,
          at::MemoryFormat format = at::MemoryFormat::Contiguous, const Tuning& tuning = {});
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  // decode: z [1, L, T, h, w] → video [1, 3, T', 8h, 8w] (unclamped), T' = 1 + 4(T − 1) when
  //   `first` (the slice holds sequence frame 0), else 4T.
  // encode: video [1, 3, F, H, W] → [1, 2L, F', H/8, W/8]: the posterior mean (channels [0, L))
  //   and its logvar clamped to [−30, 20] ([L, 2L)); F = 1 + 4k → 1 + k when `first`, 4k → k
  //   after. Frame counts are the caller's to check.
  // `first` resets nothing: give a fresh state with it.
  at::Tensor forward(const at::Tensor& x, StreamState& state, bool first) const;

  // The same computation, stage by stage; a stage whose input needs more than `work_bytes`
  // (estimated; 0: no limit) runs over time chunks of it, each taken through the remaining
  // stages before the next. `emit` gets the output in time order, chunk by chunk ([1, C, n, H,
  // W], the network's dtype and layout); the chunks concatenated equal forward()'s result.
  void forward_chunks(const at::Tensor& x, StreamState& state, bool first, int64_t work_bytes,
                      const std::function<void(const at::Tensor&)>& emit) const;

  // forward_chunks in phases: phase p runs stages [starts[p], starts[p + 1]) (starts[0] = 0, the
  // last phase to the end) over the whole input, in chunks of work[p] bytes; a phase's output
  // goes to host memory (CUDA: pinned, on the worker's side stream 1, while later chunks
  // compute) and the next phase runs over that spool one frame at a time (the next frame comes
  // up on side stream 0 while the current one computes). At the start of each phase the
  // device-resident memory of every other phase's slots goes to host memory (park), so each
  // slot needs device memory only during its phase. Same result as forward_chunks.
  void forward_phased(const at::Tensor& x, StreamState& state, bool first,
                      const std::vector<size_t>& starts, const std::vector<int64_t>& work,
                      const std::function<void(const at::Tensor&)>& emit) const;
  // Where phases start (phase_starts(n)[0] = 0). Decoder, n = 2: the top level (from its last
  // Upsample3D) after the rest; n = 3: besides, the top level's first resnet (with the
  // Upsample3D: its widest slots) before its other stages; n = 4: besides, the level below the
  // top (from its Upsample3D) after the lower ones. {0} without phases (the encoder).
  std::vector<size_t> phase_starts(int phases) const;
  size_t stage_count() const;
  // Bytes of stage `index`'s input per latent frame (decode: one input frame after the first
  // slice; h × w latent pixels): what a phase starting there spools per latent frame.
  int64_t stage_input_bytes(size_t index, int64_t h, int64_t w, int64_t element_size) const;
  // Per slot: whether stages [begin, end) use it.
  std::vector<char> stage_slots(size_t begin, size_t end) const;
  // The device-resident memory of the slots in `which` to host memory (CUDA: pinned, on side
  // stream 1; the next use brings it back). No-op on the CPU.
  void park(StreamState& state, const std::vector<char>& which) const;

  // Bytes of slot `slot`'s memory for an input of h × w pixels (decode: latent pixels) in
  // `element_size`-byte values: kt − st frames of the conv's input at its resolution.
  int64_t slot_bytes(int slot, int64_t h, int64_t w, int64_t element_size) const;
  // Which slots to keep in host memory so that at most `device_bytes` of state stays on the
  // device: the lowest resolutions go first (their convs do the most arithmetic per byte of
  // state, so their copies hide best), then by execution order. All 0 when everything fits.
  // `among` (empty: every slot): only these slots count and may go.
  std::vector<char> host_slots(int64_t h, int64_t w, int64_t element_size, int64_t device_bytes,
                               const std::vector<char>& among = {}) const;
  // One frame of the widest conv input (channels × pixels at its resolution), in bytes: the
  // unit of a time chunk's working memory.
  // `among` (empty: every slot): the slots that count.
  int64_t largest_frame_bytes(int64_t h, int64_t w, int64_t element_size,
                              const std::vector<char>& among = {}) const;

  bool decoder() const { return decoder_; }
  const Architecture& arch() const { return arch_; }
  int state_slots() const { return slots_; }
  at::MemoryFormat memory_format() const { return format_; }
  const Tuning& tuning() const { return tuning_; }

 private:
  at::Tensor conv(const Conv& c, at::Tensor x, StreamState& s, bool first) const;
  void receive_memory(const Conv& c, const at::Tensor& like, StreamState& s) const;
  void send_memory(const Conv& c, StreamState& s) const;
  at::Tensor resnet(const Resnet& r, const at::Tensor& x, StreamState& s, bool first) const;
  at::Tensor attention(const Attention& a, const at::Tensor& x) const;
  at::Tensor upsample(const Upsample& u, const at::Tensor& x, StreamState& s, bool first) const;
  at::Tensor group_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                        bool silu) const;
  // The fused path (tuning.fused on a channels-last network).
  void norm_into(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool silu,
                 const at::Tensor& out) const;
  // The conv's input buffer; a host-resident slot's memory starts coming up into its time
  // padding at once (StreamState::uploading).
  at::Tensor conv_buffer(const Conv& c, int64_t channels, int64_t frames, int64_t h, int64_t w,
                         const at::TensorOptions& options, StreamState& s, bool first) const;
  bool host_slot(const Conv& c, const StreamState& s) const;
  // Before the host reads a host slot's memory or the current stream copies it up outside
  // conv_buffer: the copy that wrote it has landed.
  void wait_written(int slot, StreamState& s) const;
  void size_state(StreamState& state) const;
  // After a call: no frames wait at a temporal downsampler (ModelError otherwise).
  void check_drained(StreamState& state) const;
  // A host slot's new memory (frames of a device tensor) to the host.
  void write_back(int slot, const at::Tensor& frames, StreamState& s) const;
  at::Tensor conv_buffered(const Conv& c, at::Tensor buffer, StreamState& s, bool first) const;
  at::Tensor pointwise(const Conv& c, const at::Tensor& x) const;
  // The fused stages take their input by value: an input nobody else holds is freed as soon as
  // it has been read (the shortcut computed first), not after the stage.
  at::Tensor resnet_fused(const Resnet& r, at::Tensor x, StreamState& s, bool first) const;
  at::Tensor upsample_fused(const Upsample& u, at::Tensor x, StreamState& s, bool first) const;
  at::Tensor run_stage(const Stage& stage, at::Tensor x, StreamState& s, bool first) const;
  int64_t stage_bytes_per_frame(const Stage& stage, const at::Tensor& x) const;
  // Stages [index, end) over x, then emit.
  void run_from(size_t index, size_t end, at::Tensor x, StreamState& s, bool first,
                int64_t work_bytes, const std::function<void(const at::Tensor&)>& emit) const;

  Architecture arch_;
  bool decoder_;
  at::MemoryFormat format_;
  Tuning tuning_;
  bool fused_ = false;
  int slots_ = 0;
  // Per slot: input channels, frames kept, resolution as a power of 2 of the network's input
  // (decoder: up, encoder: down).
  struct SlotInfo {
    int64_t channels = 0, keep = 0;
    int scale = 0;
  };
  std::vector<SlotInfo> slot_info_;
  std::vector<Stage> stages_;  // execution order
  size_t split_ = 0;           // the top level's first stage (decoder; 0: none)
  std::unique_ptr<Conv> conv_in_, conv_out_;
  std::vector<std::vector<Resnet>> blocks_;    // per level, encoder or decoder order
  std::vector<std::unique_ptr<Conv>> down_;    // encoder: per level (null: none)
  std::vector<std::unique_ptr<Upsample>> up_;  // decoder: per level (null: none)
  std::vector<Resnet> mid_;                    // resnets.0, resnets.1
  std::unique_ptr<Attention> attention_;
  at::Tensor norm_out_w_, norm_out_b_;
};

}  // namespace wm::models::seedvr2
