// A job file, validated. `load_job_file` reads a YAML job, checks every key (unknown keys, wrong
// types, missing fields, bad values) before any work starts, and throws ConfigError
// ("FILE:LINE: KEY: problem", exit 65) on the first problem. The full format, with an example
// for every key, is docs/job-format.md.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "src/model.h"

namespace YAML {
class Node;
}

namespace wm {

enum class OnExists { kFail, kSkip, kOverwrite };
enum class Task { kUpscale, kDecodeLatents, kEncodeLatents, kReconstruct, kDit };
// How input video is decoded: software (libavcodec on the CPU), nvdec (NVDEC on the job's first
// GPU, GPU 0 when the job runs on the CPU; software where that fails), auto (nvdec when the job's
// devices include a GPU, else software).
enum class DecodeMode { kSoftware, kNvdec, kAuto };
// Interlaced input: auto (bwdif for sources flagged interlaced), off (keep the fields; the output
// is flagged with the source's field order), bwdif (deinterlace every input).
enum class DeinterlaceMode { kAuto, kOff, kBwdif };
// Where an upscale job's frames live between decoding and encoding (docs/job-format.md,
// frame_path): auto (on the device for a neural upscaler on GPUs where the job allows it, else
// the host), device (the device frame path wherever it applies, also on the CPU), host (float RGB
// frames on the host, as every job did before).
enum class FramePathMode { kAuto, kDevice, kHost };
const char* to_string(Task t);
const char* to_string(OnExists o);
const char* to_string(DecodeMode d);
const char* to_string(FramePathMode f);

struct EncodeSpec {
  std::string codec = "libx264";  // libx264 | libx265 | ffv1 | prores_ks | any libav encoder
  int crf = 18;
  std::string preset = "medium";
  std::string pix_fmt;  // empty: follow the source (yuv420p, or yuv420p10le for >8-bit)
  bool copy_audio = true;
  bool copy_subtitles = true;
  int threads = 0;
  // `instances`: encoders at once on one output, each on its own segments (scheduler/
  // segment_encode.h); 0 = auto (several on the device frame path when the host has the cores,
  // else 1). Only the device frame path uses more than one.
  int instances = 0;
  // Encoder options by libav name, as ffmpeg's `-KEY VALUE` after `-c:v` (tune, profile, g,
  // x264-params, ...), in the job's order. Set after crf and preset, so they can override them.
  std::vector<std::pair<std::string, std::string>> options;
  // The muxer of an output on standard output (the job's top-level `format:`, mkv | nut | y4m |
  // ts, as its libav name: src/base/std_streams.h); empty: the output's extension picks it.
  std::string container;
  // Lines of these keys in the job file (0: not given), for the checks that need libav and run
  // after parsing (io/encoder_check.h, called by the runner before any job starts).
  int codec_line = 0;
  int pix_fmt_line = 0;
  std::vector<int> option_lines;  // one per entry of `options`
};

struct TilingSpec {
  bool enabled = false;    // false: whole frames ("tiling: none")
  bool automatic = false;  // "tiling: auto": sized from free memory
  int tile_width = 0;      // input pixels
  int tile_height = 0;
  int overlap = 0;  // input pixels shared by neighbouring tiles (>= model halo for exactness)
  // `exact: true`: tiles reproduce the untiled output (models with an approximate default halo,
  // RRDBNet, then use their exact, larger one). Also in ModelConfig::exact_tiles.
  bool exact = false;
};

// How a job uses several devices or ranks (`parallel:`; docs/job-format.md, docs/gpu.md).
// data: inputs and (for models without causal state) slices spread over the devices; sequence:
// each slice of a causal model split in time over the ranks (exact, halo exchange); spatial:
// each slice split into bands of rows, every frame on every rank (exact, a row halo per
// convolution; Wan2.1 decode); auto: for a causal model that supports it on more than one rank,
// sequence, or spatial per video where it wins (parallel::choose_split); else data.
enum class ParallelMode { kAuto, kData, kSequence, kSpatial };
const char* to_string(ParallelMode m);
struct ParallelSpec {
  ParallelMode mode = ParallelMode::kAuto;
  int ranks = 0;  // 0: one per device (cpu: 1); with devices: cpu, N in-process CPU ranks
  // `inputs`: inputs of a batch in flight at once (input lanes; docs/gpu.md); 0: auto (data
  // mode: one per rank, at most the batch; sequence: 1).
  int inputs = 0;
  // `timeout` (seconds): the longest a sequence-parallel rank may take over its part of a slice.
  double timeout_seconds = 1800;
  // `exchange`: how sequence-parallel ranks pass their halos. In-process (default): peer copies
  // between the GPUs of this process, ordered by CUDA events. NCCL (`nccl`, builds with
  // WMBATCH_WITH_NCCL, one rank per GPU): opt-in, since its runs hung on two and four H200s
  // (docs/gpu.md, "NCCL").
  bool nccl = false;
  // `fault` (test only, undocumented in job-format.md): parallel/rank_fault.h.
  std::string fault;
  // Set by the runner for an input lane, not job keys: this lane uses the job's ranks
  // [first_rank, first_rank + lane_ranks) (rank r on device r mod n, lane r / n); 0: all.
  int first_rank = 0;
  int lane_ranks = 0;
};

struct JobSpec {
  std::string file;  // the job file as given
  std::string dir;   // its folder, absolute: relative paths in the job resolve against it
  int line = 0;      // first line of this job in the file
  std::string name;  // `job:` or the file's stem
  Task task = Task::kUpscale;
  // As written; may hold globs and folders (resolved relative to dir); standard input is
  // "pipe:0" (src/base/std_streams.h) however it was spelled.
  std::vector<std::string> inputs;
  std::vector<int> input_lines;  // 1-based line of each entry of `inputs`, for errors
  std::string output;            // template: {stem} {ext} {job} {dir}; standard output is "pipe:1"
  int output_line = 0;           // line of `output:`
  OnExists on_exists = OnExists::kFail;
  ModelConfig model;
  std::string devices = "cpu";  // cpu | auto | list ("list": the GPU indices are in device_ids)
  std::vector<int> device_ids;
  TilingSpec tiling;
  int slice_frames = 0;  // frames (latent frames for decode_latents) per slice; 0 = auto
  int tokens = 3;        // slices in flight (bounds memory)
  EncodeSpec encode;
  double fps = 0;  // decode_latents: output frame rate (0: from the file, else 16)
  // Tensor name of a .safetensors input: decode_latents / encode_latents ("latent"), upscale
  // ("input" unless given).
  std::string input_tensor = "latent";
  double max_error_rate = 0.0;                // tolerated fraction of undecodable packets
  DecodeMode decode = DecodeMode::kSoftware;  // upscale only so far (see docs/job-format.md)
  // Every validated key of the job's document that can change the output's bits, as canonical
  // text (keys sorted, one `path: value` a line). Everything but the keys that only choose what
  // to read, where to write or how to schedule (job, input, output, on_exists, tokens, decode,
  // offload), so a key added later is in it by default. The farm fingerprint hashes it.
  std::string output_settings;
  DeinterlaceMode deinterlace = DeinterlaceMode::kAuto;
  ParallelSpec parallel;
  // `debug_tensors`: a tensor job (task dit, or upscale of a .safetensors input by a model that
  // runs on tensors) also writes every intermediate into its output.
  bool debug_tensors = false;
  FramePathMode frame_path = FramePathMode::kAuto;  // upscale only
  int weights_line = 0;  // line of `model.weights` (0: none), for checks made after parsing
  // The command that runs this job again, for the line of an interrupted input; empty: `wmbatch
  // FILE` (a job built from a one-line command sets it: src/job_command.h).
  std::string rerun;
};

// Replaces the job's devices with a command-line value (`wmbatch --devices`): "cpu", "auto" or
// GPU indices like "0,1". Throws wm::Error (kExitUsage) naming the value when it is none of these.
void override_devices(JobSpec& job, const std::string& value);

// Loads every job in `path` (one YAML document per job; `---` separates several).
std::vector<JobSpec> load_job_file(const std::string& path);
// Parses YAML text; `path` names it in errors and anchors relative paths.
std::vector<JobSpec> parse_job_text(const std::string& text, const std::string& path);
// Parses one job from a YAML map already loaded (a job inlined in another file, such as an entry
// of a WATCH.yaml): errors name `path` and the lines the nodes carry (a node added by the caller
// has none: its errors give the map's line); `default_name` when the map has no `job:`.
JobSpec parse_job_node(const YAML::Node& map, const std::string& path,
                       const std::string& default_name);

// Expands `{stem}`, `{ext}`, `{job}`, `{dir}` (the input's folder) in `output_template` for one
// input; the result is resolved against job_dir when relative. Unknown placeholders throw.
// `{stem}` is the input's file name without extension (an image sequence's, "shots/a_%04d.png",
// without its number: "a"; "frames/%06d.png": the folder's name, "frames"), `{ext}` its
// extension with the dot,
// `{dir}` its absolute folder (allowed only at the start of the template); `{{` and `}}` are
// literal braces. A relative input_path is taken relative to job_dir. Throws wm::Error
// (kExitDataErr) for an unknown placeholder, an unmatched brace, or an output that would be the
// input file itself. The result is lexically normalised.
std::string expand_output(const std::string& output_template, const std::string& input_path,
                          const std::string& job_name, const std::string& job_dir);

// The input files of a job: each entry of `inputs` resolved against `dir`; a glob (POSIX glob(3):
// `*`, `?`, `[...]`) expands to the files it matches (folders left out), sorted by name; a folder
// expands to its video, image or tensor files (by extension: src/media_names.h; hidden files and
// sub-folders left out, others named in a warning), sorted by name; entries keep their order and
// a file named twice appears once. Standard input stays "pipe:0". A literal path that does not
// exist is kept (the runner reports it as a missing input). A glob that matches no file, or a
// folder without media files, throws wm::Error (kExitNoInput): "FILE:LINE: input: no file
// matches 'clips/*.mp4'".
std::vector<std::string> expand_inputs(const JobSpec& job);

}  // namespace wm
