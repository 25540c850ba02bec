// One host thread budget: how many threads each host stage of one input may use — decoding,
// colour conversion, encoding, the TBB work of its graph or pipeline — sized from the host's cores
// and the input lanes that share them (docs/architecture.md, "Who owns which thread"). The
// scheduler asks it once per input (scheduler/tasks.cpp, scheduler/runner.cpp) and hands the
// counts to io/ (ReaderOptions, EncodeSettings) and to the lane's TBB arena; no stage picks its
// own count.
//
// One lane (every job that is not a batch on input lanes) gets exactly what each library chose
// by itself before the budget existed: libav's decoder and encoder on their "auto" (one thread per
// core; x264 1.5 per core), swscale one thread, TBB's default arena (one thread per core), and the
// device frame path's decode threads a quarter of the cores (2 to 8). Lanes > 1 divide the
// cores: each lane gets cores / lanes (at least 1), so the lanes' CPU-heavy stages together stay
// within the cores (or one thread per lane when there are more lanes than cores) — except the
// encoder, which gets 3 threads per lane core, at most x264's auto for the whole host (1.5 per
// core): its threads spend much of their time waiting on each other.
//
// LibTorch's intra-op pool is one per process (at::set_num_threads), shared by every lane:
// `torch_threads` is the cores, set once when the LibTorch side loads
// (src/models/torch/tensor.cpp, use_all_cpu_threads, the same rule).
//
// Pure and torch-free; thread-safe (no state).
#pragma once

#include <string>

namespace wm::parallel {

struct ThreadBudget {
  int cores = 1;       // the host's (at least 1)
  int lanes = 1;       // input lanes sharing them (at least 1)
  int lane_cores = 1;  // cores / lanes, at least 1
  // Every count is >= 1: the threads the stage runs.
  int decode_threads = 1;         // libav decoder of the host frame path
  int device_decode_threads = 1;  // libav decoder feeding the device frame path
  int convert_threads = 1;        // swscale, each direction
  int encoder_threads = 1;        // libav encoder when the job leaves encode.threads to auto:
                                  // 3 per lane core, at most 1.5 per host core
  int tbb_threads = 1;            // the lane's TBB arena (flow graph, parallel_pipeline)
  int torch_threads = 1;          // LibTorch's intra-op pool (process-wide, not divided)

  // Lanes share the cores: the counts are given to the libraries and a lane's TBB work runs in
  // an arena of its own. Otherwise (one lane) the libraries keep their own defaults, which the
  // counts above describe.
  bool divided() const { return lanes > 1; }
  // What ReaderOptions::threads / EncodeSettings::threads get: 0 (libav's auto) for one lane.
  int decoder_option() const { return divided() ? decode_threads : 0; }
  int encoder_option() const { return divided() ? encoder_threads : 0; }
  // "16 cores, 2 lanes of 8: decode 8 (device path 2), convert 1, encode 8, tbb 8, torch 16".
  std::string text() const;
};

ThreadBudget thread_budget(int cores, int lanes);

// The host's cores as the process sees them (std::thread::hardware_concurrency), at least 1.
int host_cores();

}  // namespace wm::parallel
