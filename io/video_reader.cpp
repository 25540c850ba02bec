#include "io/video_reader.h"

#include "io/output_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include "io/av_enum.h"
#include "io/av_handles.h"
#include "io/av_log.h"
#include "io/image_output.h"
#include "io/nvdec_context.h"
#include "io/pixel_convert.h"
#include "io/stdin_tee.h"
#include "src/base/error.h"
#include "src/base/log.h"
#include "src/base/std_streams.h"
#include "src/base/thread_name.h"

extern "C" {
#include <libavfilter/avfilter.h>
#include <libavfilter/buffersink.h>
#include <libavfilter/buffersrc.h>
#include <libavutil/display.h>
#include <libavutil/hwcontext.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
}

namespace wm::io {
namespace {

Rational to_rational(AVRational q) { return Rational{q.num, q.den}; }

std::vector<uint8_t> stream_side_data(const AVStream* stream, AVPacketSideDataType type) {
  size_t size = 0;
  const uint8_t* data = av_stream_get_side_data(stream, type, &size);
  if (!data || size == 0) return {};
  return std::vector<uint8_t>(data, data + size);
}

// Matroska's per-track "DURATION" tag ("HH:MM:SS.nnnnnnnnn"), written by libavformat's muxer
// into the header at finish, so it survives when the end of the file is cut off.
double tag_duration_seconds(const AVStream* stream) {
  const AVDictionaryEntry* entry = av_dict_get(stream->metadata, "DURATION", nullptr, 0);
  if (!entry) return -1;
  int hours = 0, minutes = 0;
  double seconds = 0;
  if (std::sscanf(entry->value, "%d:%d:%lf", &hours, &minutes, &seconds) != 3) return -1;
  return hours * 3600.0 + minutes * 60.0 + seconds;
}

bool has_cuda_device_config(const AVCodec* codec) {
  for (int i = 0;; ++i) {
    const AVCodecHWConfig* config = avcodec_get_hw_config(codec, i);
    if (!config) return false;
    if ((config->methods & AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX) &&
        config->device_type == AV_HWDEVICE_TYPE_CUDA) {
      return true;
    }
  }
}

// The decoder of `id` that can run on NVDEC: libavcodec's default one when it can, else another
// decoder of that codec (AV1: the default is libdav1d; the native av1 decoder has NVDEC). Null
// when none can.
const AVCodec* find_nvdec_decoder(AVCodecID id) {
  const AVCodec* preferred = avcodec_find_decoder(id);
  if (preferred && has_cuda_device_config(preferred)) return preferred;
  void* iterator = nullptr;
  while (const AVCodec* codec = av_codec_iterate(&iterator)) {
    if (codec->id == id && av_codec_is_decoder(codec) && has_cuda_device_config(codec)) {
      return codec;
    }
  }
  return nullptr;
}

// get_format for NVDEC: CUDA frames when offered. libavcodec drops CUDA from the list when the
// hwaccel cannot take the stream (profile, chroma format, size) and asks again; then the first
// software format, and the reader notices the software frame (Impl::take_frame).
AVPixelFormat pick_cuda_format(AVCodecContext*, const AVPixelFormat* formats) {
  for (const AVPixelFormat* f = formats; *f != AV_PIX_FMT_NONE; ++f) {
    if (*f == AV_PIX_FMT_CUDA) return *f;
  }
  for (const AVPixelFormat* f = formats; *f != AV_PIX_FMT_NONE; ++f) {
    const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(*f);
    if (desc && !(desc->flags & AV_PIX_FMT_FLAG_HWACCEL)) return *f;
  }
  return AV_PIX_FMT_NONE;
}

struct FilterGraphDeleter {
  void operator()(AVFilterGraph* graph) const { avfilter_graph_free(&graph); }
};
using FilterGraphPtr = std::unique_ptr<AVFilterGraph, FilterGraphDeleter>;

bool interlaced_order(int field_order) {
  return field_order == AV_FIELD_TT || field_order == AV_FIELD_BB || field_order == AV_FIELD_TB ||
         field_order == AV_FIELD_BT;
}

std::vector<uint8_t> frame_side_data(const AVFrame* frame, AVFrameSideDataType type) {
  const AVFrameSideData* sd = av_frame_get_side_data(frame, type);
  if (!sd || sd->size == 0) return {};
  return std::vector<uint8_t>(sd->data, sd->data + sd->size);
}

// The picture size a PNG (IHDR) or JPEG (SOFn) file declares in its first 64 KiB, read without
// libav (which refuses to report a size it cannot decode); nullopt for other files.
std::optional<std::pair<unsigned, unsigned>> declared_image_size(const std::string& file) {
  FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) return std::nullopt;
  unsigned char head[65536];
  const size_t n = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  auto be = [&](size_t at, int bytes) {
    unsigned v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | head[at + size_t(i)];
    return v;
  };
  if (n >= 24 && std::memcmp(head, "\x89PNG\r\n\x1a\n", 8) == 0 &&
      std::memcmp(head + 12, "IHDR", 4) == 0) {
    return std::pair{be(16, 4), be(20, 4)};
  }
  if (n < 4 || head[0] != 0xff || head[1] != 0xd8) return std::nullopt;
  for (size_t at = 2; at + 9 <= n && head[at] == 0xff;) {
    const unsigned marker = head[at + 1];
    if (marker == 0xff) {  // fill byte
      ++at;
      continue;
    }
    const bool sof =
        marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc;
    if (sof) return std::pair{be(at + 7, 2), be(at + 5, 2)};
    if (marker == 0xd9 || marker == 0xda) break;  // end, or scan data
    at += 2 + be(at + 2, 2);
  }
  return std::nullopt;
}

}  // namespace

struct VideoReader::Impl {
  std::string path;
  ReaderOptions options;
  std::shared_ptr<spdlog::logger> log;
  // Standard input's reader (kStdinName), which `format` uses without owning (custom I/O):
  // declared first, so it is closed after `format`.
  struct AvioDeleter {
    void operator()(AVIOContext* io) const { close_stdin(io); }
  };
  std::unique_ptr<AVIOContext, AvioDeleter> stdin_io;
  FormatInputPtr format;
  AVStream* stream = nullptr;
  int stream_index = -1;
  CodecContextPtr decoder;
  PacketPtr packet = make_packet();
  FramePtr frame = make_frame();
  FrameToPlanar converter;
  VideoInfo info;
  // The first decoded frame, taken at open to learn what only frames carry (HDR10 SEI, field
  // flags); the first read returns it.
  FramePtr primed = make_frame();
  bool have_primed = false;
  // What the first frame's pixel format keeps (depth, alpha, gray): every frame returned must
  // keep the same, as the output is made for the first (docs/exit-codes.md, exit 65).
  std::optional<FormatFamily> family;
  int64_t sequence_first = -1;  // an image sequence's first number; -1 for one file

  // Deinterlacing (bwdif through libavfilter), built on the first frame after open or a seek.
  bool deinterlace = false;
  FilterGraphPtr graph;
  AVFilterContext* graph_source = nullptr;
  AVFilterContext* graph_sink = nullptr;
  bool graph_flushed = false;
  int graph_width = 0, graph_height = 0, graph_format = -1;  // what the graph was built for
  // A decoded frame whose size or format differs from the graph's: it waits while the old graph
  // drains, then starts a new one. (libavfilter 8's buffer source only warns of such a change,
  // and bwdif then reads its neighbours' planes out of bounds: found by fuzzing.)
  FramePtr held = make_frame();
  bool have_held = false;

  // NVDEC state. kTrying: the decoder runs on NVDEC but no frame has come out of it yet; any
  // failure until then restarts the file in software (fall_back). kOn: frames came out.
  enum class Hw { kOff, kTrying, kOn };
  Hw hw = Hw::kOff;
  FramePtr downloaded = make_frame();  // a CUDA frame copied to system memory

  int64_t frame_duration = 0;  // nominal, in time_base; 0 when the rate is unknown
  bool constant_rate = false;

  // Decode state.
  int64_t next_index = 0;
  int64_t discard_below = 0;    // frames with a smaller index are decoded and dropped (seek)
  bool index_from_pts = false;  // frames derive (and check) their index from pts (after a seek)
  int64_t seek_target = 0;
  int64_t last_pts = AV_NOPTS_VALUE;
  int64_t last_duration = 0;
  bool demux_eof = false;
  bool from_start = true;  // every packet since the stream start went through the decoder
  int64_t packets = 0;
  int64_t errors = 0;
  int64_t frames_read = 0;

  Impl(const std::string& p, const ReaderOptions& o)
      : path(p), options(o), converter(o.convert_threads) {
    install_av_log();
    open_file();
    fill_info();
    log = wm::log::get("dec:" + info.codec);
    open_decoder();
    prime();
    choose_deinterlace();
    log->debug("{}: {}x{} {} {} fps, ~{} frames, time base {}/{}, decoder {}", path, info.width,
               info.height, info.pix_fmt, info.frame_rate.value(), info.frames_estimate,
               info.time_base.num, info.time_base.den, decoder_name());
  }

  [[noreturn]] void corrupt(const std::string& detail) const {
    throw InputError(path + ": truncated or corrupt (" + detail + ")", kExitDataErr);
  }

  // Standard input: probed first, so that a stream that needs seeking (MP4/MOV, whose index may
  // come last) is refused with one clear line instead of the demuxer's errors.
  AVFormatContext* open_standard_input() {
    if (::isatty(STDIN_FILENO)) {
      throw InputError(path +
                           ": standard input is a terminal; pipe a stream into it (e.g. ffmpeg -i "
                           "in.mp4 -f nut - | wmbatch upscale - ...)",
                       kExitUsage);
    }
    // Through the tee: the writer reads standard input again for its audio (io/stdin_tee.h).
    AVIOContext* io = io::open_stdin();
    if (!io) throw InputError(path + ": standard input was read already", kExitUsage);
    stdin_io.reset(io);
    const AVInputFormat* probed = nullptr;
    int rc = av_probe_input_buffer2(io, &probed, kStdinName, nullptr, 0, 0);
    if (rc < 0 || !probed) {
      if (rc == AVERROR_EOF) throw InputError(path + ": standard input is empty", kExitNoInput);
      corrupt("cannot tell the stream's container: " + av_error_string(rc));
    }
    const std::string name = probed->name;
    if (name.find("mov") != std::string::npos || name.find("mp4") != std::string::npos) {
      throw InputError(path +
                           ": an MP4/MOV stream cannot be read from a pipe: it needs seeking "
                           "(its index may come last); send MPEG-TS, Matroska, NUT or Y4M "
                           "instead (ffmpeg ... -f nut -)",
                       kExitDataErr);
    }
    AVFormatContext* raw = avformat_alloc_context();
    if (!raw) throw std::bad_alloc();
    raw->pb = io;
    raw->flags |= AVFMT_FLAG_CUSTOM_IO;
    rc = avformat_open_input(&raw, kStdinName, probed, nullptr);  // frees `raw` on failure
    if (rc < 0) corrupt("cannot open: " + av_error_string(rc));
    // NVDEC's fallback decodes again from the start: a pipe cannot go back.
    options.nvdec = false;
    return raw;
  }

  void open_file() {
    if (path == kStdinName) {
      format.reset(open_standard_input());
      return find_video_stream("");  // no file to read an image header from
    }
    struct stat st {};
    // An image sequence ("frames/%06d.png", libav's image2 demuxer) is there when its first
    // file is (io/image_output.h).
    std::string file = path;
    if (::stat(path.c_str(), &st) != 0 && image_path_kind(path) == ImagePath::kSequence) {
      const int64_t first = sequence_start_number(path);
      file = sequence_file_name(path, first);
      sequence_first = first;
      if (::stat(file.c_str(), &st) != 0) {
        throw InputError(path + ": no file of this image sequence (numbered 0 to 4 at first)",
                         kExitNoInput);
      }
    }
    if (::stat(file.c_str(), &st) != 0) {
      throw InputError(path + ": " + std::strerror(errno), kExitNoInput);
    }
    if (S_ISDIR(st.st_mode)) throw InputError(path + ": is a directory", kExitNoInput);
    if (::access(file.c_str(), R_OK) != 0) {
      throw InputError(path + ": " + std::strerror(errno), kExitNoInput);
    }
    AVFormatContext* raw = nullptr;
    // A file whose name only looks like a pattern ("50%d.png") is that one file.
    AVDictionary* open_options = literal_name_options(path);
    int rc = avformat_open_input(&raw, path.c_str(), nullptr, &open_options);
    av_dict_free(&open_options);
    if (rc < 0) {
      if (rc == AVERROR(ENOENT) || rc == AVERROR(EACCES) || rc == AVERROR(EPERM)) {
        throw InputError(path + ": " + av_error_string(rc), kExitNoInput);
      }
      corrupt("cannot open: " + av_error_string(rc));
    }
    format.reset(raw);
    find_video_stream(file);
  }

  // `file`: the file to read an image's declared size from when libav gives none ("": none).
  void find_video_stream(const std::string& file) {
    const int rc = avformat_find_stream_info(format.get(), nullptr);
    if (rc < 0) corrupt("cannot read stream info: " + av_error_string(rc));
    stream_index = pick_video_stream(format.get());
    if (stream_index < 0) throw InputError(path + ": no video stream", kExitDataErr);
    stream = format->streams[stream_index];
    check_declared_size(file);
    // Only the video stream is demuxed into packets; the writer reads audio on its own.
    for (unsigned i = 0; i < format->nb_streams; ++i) {
      if (int(i) != stream_index) format->streams[i]->discard = AVDISCARD_ALL;
    }
  }

  // A picture too large for libav (av_image_check_size) leaves the stream without a size, and
  // decoding then fails as if the file were corrupt: when an image's header says so, the error
  // says so, with the limit.
  void check_declared_size(const std::string& file) const {
    if (stream->codecpar->width > 0 && stream->codecpar->height > 0) return;
    const auto size = declared_image_size(file);
    if (!size || av_image_check_size(size->first, size->second, 0, nullptr) >= 0) return;
    throw InputError(path + ": the image declares " + std::to_string(size->first) + "x" +
                         std::to_string(size->second) +
                         " pixels, more than libav decodes: (width + 128) x (height + 128) must "
                         "stay below 2^28 (268 million), e.g. 16000x16000",
                     kExitDataErr);
  }

  void open_decoder() {
    if (options.nvdec) {
      const std::string problem = open_nvdec();
      if (problem.empty()) return;
      log->warn("{}: NVDEC not used, decoding in software: {}", path, problem);
    }
    open_software_decoder();
  }

  void open_software_decoder() {
    hw = Hw::kOff;
    const AVCodec* codec = avcodec_find_decoder(stream->codecpar->codec_id);
    if (!codec) {
      throw InputError(
          path + ": no decoder for video codec " + avcodec_get_name(stream->codecpar->codec_id),
          kExitDataErr);
    }
    decoder.reset(avcodec_alloc_context3(codec));
    if (!decoder) throw std::bad_alloc();
    av_check(avcodec_parameters_to_context(decoder.get(), stream->codecpar),
             "avcodec_parameters_to_context", path);
    decoder->pkt_timebase = stream->time_base;
    decoder->thread_count = options.threads;
    decoder->thread_type = FF_THREAD_FRAME | FF_THREAD_SLICE;
    int rc = 0;
    {
      const ScopedThreadName role(kDecodeThreads);  // its frame threads start here
      rc = avcodec_open2(decoder.get(), codec, nullptr);
    }
    if (rc < 0) {
      throw InputError(path + ": cannot open " + codec->name + " decoder: " + av_error_string(rc),
                       kExitDataErr);
    }
  }

  // Opens the decoder on NVDEC; returns why not (the reader then decodes in software), or "".
  std::string open_nvdec() {
    const AVCodecID id = stream->codecpar->codec_id;
    const AVCodec* codec = find_nvdec_decoder(id);
    if (!codec) return std::string("NVDEC does not decode ") + avcodec_get_name(id);
    const std::string gpu = std::to_string(options.cuda_device);
    // The GPU's primary context, LibTorch's (io/nvdec_context.h says why not one of its own).
    std::string why;
    AVBufferRef* raw_device = nvdec_primary_device(options.cuda_device, why);
    if (!raw_device) return "cannot open CUDA device " + gpu + " for NVDEC: " + why;
    const BufferRefPtr device(raw_device);
    CodecContextPtr context(avcodec_alloc_context3(codec));
    if (!context) throw std::bad_alloc();
    av_check(avcodec_parameters_to_context(context.get(), stream->codecpar),
             "avcodec_parameters_to_context", path);
    context->pkt_timebase = stream->time_base;
    context->hw_device_ctx = av_buffer_ref(device.get());
    if (!context->hw_device_ctx) throw std::bad_alloc();
    context->get_format = pick_cuda_format;
    // NVDEC does the decoding; more threads would only parse ahead (and hold more surfaces).
    // One thread also keeps every libav line of the attempt on the reading thread.
    context->thread_count = 1;
    // Until the first frame is out, libav's lines about this context go to the debug level: a
    // failure then is reported once, by fall_back().
    context->log_level_offset = AV_LOG_DEBUG - AV_LOG_ERROR;
    const int rc = avcodec_open2(context.get(), codec, nullptr);
    if (rc < 0) {
      return std::string("cannot open ") + codec->name + " on NVDEC: " + av_error_string(rc);
    }
    decoder = std::move(context);
    hw = Hw::kTrying;
    return {};
  }

  // NVDEC failed before its first frame (or a frame could not be copied out of GPU memory):
  // decodes again in software, from the start (or, after a seek or frames already returned, by
  // seeking to the next frame due), so indices, pts and pixels are those of a software read.
  void fall_back(const std::string& problem) {
    const int64_t target = std::max(discard_below, next_index);
    log->warn("{}: NVDEC failed ({}); decoding in software from {}", path, problem,
              target > 0 ? "frame " + std::to_string(target) : std::string("the start"));
    av_frame_unref(frame.get());
    open_software_decoder();
    seek_to_frame(target);
  }

  // A decode call failed while NVDEC had not produced a frame yet: falls back and returns true.
  bool hw_not_working(const std::string& problem) {
    if (hw != Hw::kTrying) return false;
    fall_back(problem);
    return true;
  }

  // Takes a frame from the decoder: a CUDA frame is copied to system memory with its
  // properties; the first frame decides whether NVDEC works. False when the reader fell back to
  // software instead (decoding starts again).
  bool take_frame() {
    if (hw == Hw::kOff) return true;
    if (frame->format != AV_PIX_FMT_CUDA) {
      if (hw == Hw::kOn) return true;  // libavcodec decodes a later stream change in software
      std::string stream_kind = decoder->codec->name;
      if (const char* profile = avcodec_profile_name(decoder->codec_id, decoder->profile)) {
        stream_kind += std::string(" ") + profile;
      }
      fall_back("stream not supported: " + stream_kind + ", " + info.pix_fmt + ", " +
                std::to_string(info.width) + "x" + std::to_string(info.height));
      return false;
    }
    av_frame_unref(downloaded.get());
    int rc = av_hwframe_transfer_data(downloaded.get(), frame.get(), 0);
    if (rc >= 0) rc = av_frame_copy_props(downloaded.get(), frame.get());
    // libavcodec crops hardware frames only at the right and bottom; the left and top crop
    // travel in the properties and are applied here, as the software decoder would.
    if (rc >= 0) rc = av_frame_apply_cropping(downloaded.get(), 0);
    if (rc < 0) {
      fall_back("cannot copy frame " + std::to_string(next_index) +
                " from the GPU: " + av_error_string(rc));
      return false;
    }
    av_frame_unref(frame.get());
    av_frame_move_ref(frame.get(), downloaded.get());
    if (hw == Hw::kTrying) {
      hw = Hw::kOn;
      decoder->log_level_offset = 0;
      log->debug("{}: decoding on NVDEC (CUDA device {})", path, options.cuda_device);
    }
    return true;
  }

  void set_display_matrix(std::vector<uint8_t> matrix) {
    info.display_matrix = std::move(matrix);
    info.rotation_degrees = 0;
    if (info.display_matrix.size() >= 9 * sizeof(int32_t)) {
      const double angle =
          av_display_rotation_get(reinterpret_cast<const int32_t*>(info.display_matrix.data()));
      info.rotation_degrees = std::isnan(angle) ? 0.0 : angle + 0.0;  // + 0.0: no "-0"
    }
  }

  // Decodes the first frame and fills what the container may not say from it.
  void prime() {
    if (!decode_raw()) return;
    av_frame_move_ref(primed.get(), frame.get());
    have_primed = true;
    const AVFrame* f = primed.get();
    family = format_family(*f);
    // A rotation the frames carry and the stream does not: a JPEG's EXIF orientation, which
    // libavcodec gives as each frame's display matrix. Carried like a stream's (VideoWriter
    // stores it where the container can, else turns the pixels): a phone photo stays upright.
    if (info.display_matrix.empty()) {
      set_display_matrix(frame_side_data(f, AV_FRAME_DATA_DISPLAYMATRIX));
    }
    // A palette image's alpha is in its palette (PNG tRNS, GIF): the stream does not say.
    info.alpha = info.alpha || family->alpha;
    if (info.mastering_display.empty()) {
      info.mastering_display = frame_side_data(f, AV_FRAME_DATA_MASTERING_DISPLAY_METADATA);
    }
    if (info.content_light.empty()) {
      info.content_light = frame_side_data(f, AV_FRAME_DATA_CONTENT_LIGHT_LEVEL);
    }
    info.hdr10_plus = av_frame_get_side_data(f, AV_FRAME_DATA_DYNAMIC_HDR_PLUS) != nullptr;
    info.dolby_vision = info.dolby_vision ||
                        av_frame_get_side_data(f, AV_FRAME_DATA_DOVI_RPU_BUFFER) != nullptr ||
                        av_frame_get_side_data(f, AV_FRAME_DATA_DOVI_METADATA) != nullptr;
    // A frame flagged interlaced says so even when the container does not; an unflagged frame
    // proves nothing (many codecs have no such flag), so it leaves the field order as it is.
    if (!interlaced_order(info.field_order) && f->interlaced_frame) {
      info.field_order = f->top_field_first ? AV_FIELD_TT : AV_FIELD_BB;
    }
  }

  void choose_deinterlace() {
    const bool interlaced = interlaced_order(info.field_order);
    deinterlace = options.deinterlace == Deinterlace::kBwdif ||
                  (options.deinterlace == Deinterlace::kAuto && interlaced);
    info.deinterlaced = deinterlace;
    if (options.deinterlace == Deinterlace::kAuto && interlaced) {
      log->info(
          "{}: interlaced source ({} field first): deinterlacing with bwdif (deinterlace: off "
          "keeps the fields)",
          path, top_first() ? "top" : "bottom");
    } else if (deinterlace) {
      log->info("{}: deinterlacing with bwdif", path);
    }
  }

  bool top_first() const {
    return info.field_order == AV_FIELD_TT || info.field_order == AV_FIELD_BT ||
           !interlaced_order(info.field_order);
  }

  void build_graph(const AVFrame& f) {
    graph.reset(avfilter_graph_alloc());
    if (!graph) throw std::bad_alloc();
    graph->nb_threads = 1;
    char args[256];
    const AVRational sar = f.sample_aspect_ratio.num > 0 ? f.sample_aspect_ratio : AVRational{1, 1};
    std::snprintf(args, sizeof(args),
                  "video_size=%dx%d:pix_fmt=%d:time_base=%d/%d:pixel_aspect=%d/%d", f.width,
                  f.height, f.format, stream->time_base.num, stream->time_base.den, sar.num,
                  sar.den);
    AVFilterContext* bwdif = nullptr;
    av_check(avfilter_graph_create_filter(&graph_source, avfilter_get_by_name("buffer"), "in", args,
                                          nullptr, graph.get()),
             "avfilter_graph_create_filter(buffer)", path, kExitDataErr);
    av_check(avfilter_graph_create_filter(&graph_sink, avfilter_get_by_name("buffersink"), "out",
                                          nullptr, nullptr, graph.get()),
             "avfilter_graph_create_filter(buffersink)", path, kExitDataErr);
    // The stream's field order gives the parity; without one (bwdif on a source not flagged
    // interlaced) each frame's own flag does, top field first when it has none.
    const std::string bwdif_args =
        std::string("mode=send_frame:deint=all:parity=") +
        (interlaced_order(info.field_order) ? (top_first() ? "tff" : "bff") : "auto");
    av_check(avfilter_graph_create_filter(&bwdif, avfilter_get_by_name("bwdif"), "bwdif",
                                          bwdif_args.c_str(), nullptr, graph.get()),
             "avfilter_graph_create_filter(bwdif)", path, kExitDataErr);
    av_check(avfilter_link(graph_source, 0, bwdif, 0), "avfilter_link", path, kExitDataErr);
    av_check(avfilter_link(bwdif, 0, graph_sink, 0), "avfilter_link", path, kExitDataErr);
    av_check(avfilter_graph_config(graph.get(), nullptr), "avfilter_graph_config", path,
             kExitDataErr);
    graph_flushed = false;
    graph_width = f.width;
    graph_height = f.height;
    graph_format = f.format;
  }

  // Feeds `frame` (just decoded) to the graph.
  void add_to_graph() {
    frame->pts = frame->best_effort_timestamp;
    const int rc = av_buffersrc_add_frame(graph_source, frame.get());
    if (rc < 0) {
      throw InputError(path + ": cannot deinterlace frame " + std::to_string(next_index) + ": " +
                           av_error_string(rc) + " (deinterlace: off reads it)",
                       kExitDataErr);
    }
  }

  // The next decoded frame (deinterlaced when on) into `frame`; false at end of stream.
  bool decode_frame() {
    if (!deinterlace) return decode_raw();
    for (;;) {
      if (graph) {
        const int rc = av_buffersink_get_frame(graph_sink, frame.get());
        if (rc >= 0) {
          // bwdif counts in half the stream's time base (it could send fields as frames).
          if (frame->pts != AV_NOPTS_VALUE) {
            frame->pts = av_rescale_q(frame->pts, av_buffersink_get_time_base(graph_sink),
                                      stream->time_base);
          }
          frame->best_effort_timestamp = frame->pts;
          return true;
        }
        if (rc != AVERROR_EOF && rc != AVERROR(EAGAIN)) {
          av_check(rc, "av_buffersink_get_frame", path, kExitDataErr);
        }
        if (rc == AVERROR_EOF || graph_flushed) {
          if (!have_held) return false;
          // The old graph is drained: the held frame starts the next one.
          av_frame_unref(frame.get());
          av_frame_move_ref(frame.get(), held.get());
          have_held = false;
          build_graph(*frame);
          add_to_graph();
          continue;
        }
      }
      if (!decode_raw()) {
        if (!graph) return false;
        flush_graph();
        continue;
      }
      if (!graph) {
        build_graph(*frame);
      } else if (frame->width != graph_width || frame->height != graph_height ||
                 frame->format != graph_format) {
        log->info(
            "{}: the frame size changes from {}x{} to {}x{}: deinterlacing goes on with a new "
            "filter",
            path, graph_width, graph_height, frame->width, frame->height);
        av_frame_move_ref(held.get(), frame.get());
        have_held = true;
        flush_graph();
        continue;
      }
      add_to_graph();
    }
  }

  void flush_graph() {
    av_check(av_buffersrc_add_frame(graph_source, nullptr), "av_buffersrc_add_frame", path,
             kExitSoftware);
    graph_flushed = true;
  }

  std::string decoder_name() const {
    const std::string name = decoder->codec->name;
    return hw == Hw::kOff ? name : name + " (nvdec)";
  }

  void fill_info() {
    const AVCodecParameters* par = stream->codecpar;
    info.path = path;
    info.width = par->width;
    info.height = par->height;
    const auto pix_fmt = AVPixelFormat(par->format);
    if (const char* name = av_get_pix_fmt_name(pix_fmt)) info.pix_fmt = name;
    info.bit_depth = pix_fmt == AV_PIX_FMT_NONE ? 8 : format_bit_depth(pix_fmt);
    info.alpha = has_alpha(pix_fmt);
    info.field_order = par->field_order;
    info.dolby_vision = av_stream_get_side_data(stream, AV_PKT_DATA_DOVI_CONF, nullptr) != nullptr;
    info.codec = avcodec_get_name(par->codec_id);
    info.time_base = to_rational(stream->time_base);
    AVRational rate = stream->avg_frame_rate;
    if (rate.num <= 0 || rate.den <= 0) rate = stream->r_frame_rate;
    if (rate.num > 0 && rate.den > 0) info.frame_rate = to_rational(rate);
    info.start_pts = stream->start_time != AV_NOPTS_VALUE ? stream->start_time : 0;
    if (stream->duration != AV_NOPTS_VALUE && stream->duration > 0) {
      info.duration_seconds = stream->duration * av_q2d(stream->time_base);
    } else if (tag_duration_seconds(stream) > 0) {
      info.duration_seconds = tag_duration_seconds(stream);
    } else if (format->duration != AV_NOPTS_VALUE && format->duration > 0) {
      info.duration_seconds = double(format->duration) / AV_TIME_BASE;
    }
    if (stream->nb_frames > 0) {
      info.frames_estimate = stream->nb_frames;
    } else if (info.frame_rate.num > 0) {
      info.frames_estimate = std::llround(info.duration_seconds * info.frame_rate.value());
    }
    info.color_primaries = known_color_primaries(par->color_primaries);
    info.color_trc = known_color_trc(par->color_trc);
    info.colorspace = known_color_space(par->color_space);
    info.color_range = known_color_range(par->color_range);
    info.sample_aspect_ratio = to_rational(par->sample_aspect_ratio);
    set_display_matrix(stream_side_data(stream, AV_PKT_DATA_DISPLAYMATRIX));
    info.mastering_display = stream_side_data(stream, AV_PKT_DATA_MASTERING_DISPLAY_METADATA);
    info.content_light = stream_side_data(stream, AV_PKT_DATA_CONTENT_LIGHT_LEVEL);
    for (unsigned i = 0; i < format->nb_streams; ++i) {
      const AVMediaType type = format->streams[i]->codecpar->codec_type;
      if (type == AVMEDIA_TYPE_AUDIO) ++info.audio_streams;
      if (type == AVMEDIA_TYPE_SUBTITLE) ++info.subtitle_streams;
    }

    if (rate.num > 0 && rate.den > 0) {
      frame_duration = av_rescale_q(1, av_inv_q(rate), stream->time_base);
      // Variable-rate files declare an average rate that differs from the real base rate.
      const AVRational r = stream->r_frame_rate;
      constant_rate = frame_duration > 0 && r.num > 0 && r.den > 0 &&
                      std::fabs(av_q2d(r) / av_q2d(rate) - 1.0) < 1e-3;
    }
  }

  void count_error(int rc, const char* what) {
    ++errors;
    const double allowed =
        options.max_error_rate * double(std::max<int64_t>(packets, info.frames_estimate));
    if (double(errors) > allowed) {
      corrupt(std::string(what) + " at frame " + std::to_string(next_index) + ": " +
              av_error_string(rc));
    }
    log->warn("{}: {} at frame {}: {} (tolerated, {} so far)", path, what, next_index,
              av_error_string(rc), errors);
  }

  // At end of stream: compare what was decoded with what the container declared.
  void check_complete() {
    if (double(errors) > options.max_error_rate * double(packets)) {
      corrupt(std::to_string(errors) + " of " + std::to_string(packets) +
              " packets failed to decode");
    }
    if (!from_start) return;
    if (stream->nb_frames > 0) {
      if (stream->nb_frames - packets > 1) {
        corrupt("read " + std::to_string(packets) + " of " + std::to_string(stream->nb_frames) +
                " declared frames");
      }
      return;
    }
    if (last_pts == AV_NOPTS_VALUE) {
      if (info.frames_estimate > 1) corrupt("no frame could be decoded");
      return;
    }
    const double tb = av_q2d(stream->time_base);
    double declared_end = -1;  // absolute time where the video should end, in seconds
    if (const double tag = tag_duration_seconds(stream); tag > 0) {
      declared_end = tag;
    } else if (stream->duration != AV_NOPTS_VALUE && stream->duration > 0) {
      declared_end = (info.start_pts + stream->duration) * tb;
    } else if (format->duration != AV_NOPTS_VALUE && format->duration > 0 &&
               format->duration_estimation_method != AVFMT_DURATION_FROM_BITRATE &&
               format->nb_streams == 1) {
      const int64_t start = format->start_time != AV_NOPTS_VALUE ? format->start_time : 0;
      declared_end = double(start + format->duration) / AV_TIME_BASE;
    }
    if (declared_end < 0) return;
    const int64_t step = frame_duration > 0 ? frame_duration : std::max<int64_t>(last_duration, 1);
    const double decoded_end = (last_pts + std::max(last_duration, step)) * tb;
    if (declared_end - decoded_end > 1.5 * step * tb) {
      char detail[160];
      std::snprintf(detail, sizeof(detail),
                    "video ends at %.3f s of %.3f s declared, after %lld frames", decoded_end,
                    declared_end, static_cast<long long>(next_index));
      corrupt(detail);
    }
  }

  // Seeks the demuxer to `timestamp` (backward, to a keyframe) and resets the decoder.
  void seek_demuxer(int64_t timestamp) {
    int rc = av_seek_frame(format.get(), stream_index, timestamp, AVSEEK_FLAG_BACKWARD);
    if (rc < 0 && timestamp <= info.start_pts) {
      rc = avformat_seek_file(format.get(), -1, INT64_MIN, INT64_MIN, INT64_MIN, 0);
    }
    av_check(rc, "av_seek_frame", path, kExitDataErr);
    avcodec_flush_buffers(decoder.get());
    av_frame_unref(primed.get());
    have_primed = false;
    graph.reset();  // rebuilt on the next frame
    av_frame_unref(held.get());
    have_held = false;
    demux_eof = false;
    last_pts = AV_NOPTS_VALUE;
    last_duration = 0;
  }

  void rewind_and_discard(int64_t target) {
    seek_demuxer(info.start_pts);
    next_index = 0;
    discard_below = target;
    index_from_pts = false;
    from_start = true;
    packets = 0;
    errors = 0;
  }

  void seek_to_frame(int64_t target) {
    target = std::max<int64_t>(target, 0);
    if (target == 0 || !constant_rate) return rewind_and_discard(target);
    // bwdif takes the frame before as well: land at or before it, so that the target frame is
    // deinterlaced as in a read from the start.
    const int64_t land = deinterlace ? target - 1 : target;
    seek_demuxer(info.start_pts + land * frame_duration);
    discard_below = target;
    seek_target = target;
    index_from_pts = true;
    from_start = false;
  }

  // Receives decoded frames until one is due (index >= discard_below); false at end of stream.
  bool next_frame() {
    for (;;) {
      if (!decode_frame()) return false;
      if (accept_frame()) {
        check_family();
        return true;
      }
      av_frame_unref(frame.get());
    }
  }

  // A frame whose pixel format keeps more or other than the first one's (16-bit after 8-bit,
  // alpha, colour after gray) would be written in the first one's format, losing it silently:
  // an 8-bit PNG sequence with one 16-bit frame once came out all 8-bit with exit 0.
  void check_family() {
    const FormatFamily f = format_family(*frame);
    if (!family) family = f;
    if (f == *family) return;
    const int64_t index = next_index - 1;
    std::string where = "frame " + std::to_string(index);
    if (sequence_first >= 0) where += " (" + sequence_file_name(path, sequence_first + index) + ")";
    const char* name = av_get_pix_fmt_name(AVPixelFormat(frame->format));
    throw InputError(path + ": " + where + " is " + (name ? name : "?") + " (" + f.describe() +
                         ") after frames of " + info.pix_fmt + " (" + family->describe() +
                         "): a pixel format that changes midway is refused, as the output keeps "
                         "the first frame's; convert the frames to one format",
                     kExitDataErr);
  }

  // The next frame out of the decoder (the primed one first) into `frame`; false at its end.
  bool decode_raw() {
    if (have_primed) {
      av_frame_move_ref(frame.get(), primed.get());
      have_primed = false;
      return true;
    }
    for (;;) {
      int rc = avcodec_receive_frame(decoder.get(), frame.get());
      if (rc == 0) {
        if (!take_frame()) continue;
        return true;
      }
      if (rc == AVERROR_EOF) {
        if (packets > 0 && hw_not_working("no frame decoded")) continue;
        return false;
      }
      if (rc != AVERROR(EAGAIN)) {
        if (!hw_not_working("decode error: " + av_error_string(rc)))
          count_error(rc, "decode error");
        continue;
      }
      if (demux_eof) {  // draining never asks for input; do not spin if it does
        if (packets > 0 && hw_not_working("no frame decoded")) continue;
        return false;
      }
      rc = av_read_frame(format.get(), packet.get());
      if (rc == AVERROR_EOF) {
        demux_eof = true;
        // The flush is accepted even when an error of an earlier packet is reported with it.
        rc = avcodec_send_packet(decoder.get(), nullptr);
        if (rc < 0 && rc != AVERROR_EOF && !hw_not_working("decode error: " + av_error_string(rc)))
          count_error(rc, "decode error");
        continue;
      }
      if (rc < 0) {
        corrupt("read error after frame " + std::to_string(next_index) + ": " +
                av_error_string(rc));
      }
      if (packet->stream_index != stream_index) {
        av_packet_unref(packet.get());
        continue;
      }
      ++packets;
      const bool damaged = packet->flags & AV_PKT_FLAG_CORRUPT;
      rc = avcodec_send_packet(decoder.get(), packet.get());
      av_packet_unref(packet.get());
      if (rc < 0 && rc != AVERROR_EOF && hw_not_working("decode error: " + av_error_string(rc)))
        continue;
      if (rc < 0 && rc != AVERROR_EOF)
        count_error(rc, "decode error");
      else if (damaged)
        count_error(AVERROR_INVALIDDATA, "damaged packet");
    }
  }

  // Gives the decoded frame its pts and index; false when it is to be discarded.
  bool accept_frame() {
    if ((frame->flags & AV_FRAME_FLAG_CORRUPT) || frame->decode_error_flags) {
      count_error(AVERROR_INVALIDDATA, "corrupt frame");
    }
    int64_t duration = frame->pkt_duration > 0 ? frame->pkt_duration : frame_duration;
    int64_t pts = frame->best_effort_timestamp;
    if (pts == AV_NOPTS_VALUE) {
      pts =
          last_pts == AV_NOPTS_VALUE
              ? info.start_pts + next_index * frame_duration
              : last_pts + std::max<int64_t>(last_duration > 0 ? last_duration : frame_duration, 1);
    } else if (last_pts != AV_NOPTS_VALUE && pts <= last_pts) {
      // Writers need strictly increasing pts; a broken stream repeats or reorders them.
      const int64_t fixed = last_pts + std::max<int64_t>(last_duration, 1);
      log->warn("{}: frame {} pts {} not after {}; using {}", path, next_index, pts, last_pts,
                fixed);
      pts = fixed;
    }
    frame->best_effort_timestamp = pts;
    if (index_from_pts) {
      // After a pts seek, every frame up to the target must sit on the constant-rate grid at
      // the index it is counted as; a container that declares a constant rate for a variable-rate
      // stream fails this, and the seek is redone by decoding from the start.
      const int64_t offset = pts - info.start_pts;
      const int64_t index = (offset + frame_duration / 2) / frame_duration;
      const bool on_grid =
          offset >= 0 && std::llabs(offset - index * frame_duration) <= frame_duration / 4;
      const bool first = last_pts == AV_NOPTS_VALUE;
      if (!on_grid || (first && index > seek_target) || (!first && index != next_index)) {
        log->debug("{}: seek to frame {}: pts {} is not frame {}; decoding from the start", path,
                   seek_target, pts, first ? index : next_index);
        rewind_and_discard(seek_target);
        return false;
      }
      next_index = index;
      if (index >= seek_target) index_from_pts = false;
    }
    last_pts = pts;
    last_duration = duration;
    const int64_t index = next_index++;
    return index >= discard_below;
  }

  bool read(VideoFrame& out) {
    if (!next_frame()) {
      check_complete();
      return false;
    }
    out.index = next_index - 1;
    out.pts = frame->best_effort_timestamp;
    out.duration = last_duration;
    converter.convert(*frame, out.image, &out.alpha);
    av_frame_unref(frame.get());
    ++frames_read;
    return true;
  }

  bool read_yuv(VideoFrame& out, YuvImage& image) {
    if (!next_frame()) {
      check_complete();
      return false;
    }
    out.index = next_index - 1;
    out.pts = frame->best_effort_timestamp;
    out.duration = last_duration;
    const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(AVPixelFormat(frame->format));
    if (!desc || !yuv_device_format(frame->format)) {
      throw Error(path + ": frame " + std::to_string(out.index) + " has pixel format " +
                      (desc ? desc->name : "?") + ", not planar YUV",
                  kExitSoftware);
    }
    AVFrame* copy = av_frame_clone(frame.get());
    av_frame_unref(frame.get());
    if (!copy) throw std::bad_alloc();
    image.owner = std::shared_ptr<AVFrame>(copy, [](AVFrame* f) { av_frame_free(&f); });
    image.width = copy->width;
    image.height = copy->height;
    image.format = copy->format;
    image.depth = desc->comp[0].depth;
    image.chroma_shift_x = desc->log2_chroma_w;
    image.chroma_shift_y = desc->log2_chroma_h;
    image.colorspace = known_color_space(copy->colorspace);
    image.color_range = yuv_range(copy->format, known_color_range(copy->color_range));
    image.chroma_location = copy->chroma_location;
    image.semi_planar = desc->comp[1].plane == desc->comp[2].plane;
    image.sample_shift = desc->comp[0].shift;
    for (int p = 0; p < 3; ++p) {
      const bool used = p < 2 || !image.semi_planar;
      image.data[p] = used ? copy->data[p] : nullptr;
      image.stride[p] = used ? copy->linesize[p] : 0;
    }
    ++frames_read;
    return true;
  }
};

VideoReader::VideoReader(const std::string& path, const ReaderOptions& options)
    : impl_(std::make_unique<Impl>(path, options)) {}
VideoReader::~VideoReader() = default;
VideoReader::VideoReader(VideoReader&&) noexcept = default;
VideoReader& VideoReader::operator=(VideoReader&&) noexcept = default;

const VideoInfo& VideoReader::info() const { return impl_->info; }
bool VideoReader::read(VideoFrame& out) { return impl_->read(out); }
bool VideoReader::read_yuv(VideoFrame& out, YuvImage& image) { return impl_->read_yuv(out, image); }
void VideoReader::seek_to_frame(int64_t frame_index) { impl_->seek_to_frame(frame_index); }
int64_t VideoReader::frames_read() const { return impl_->frames_read; }
int64_t VideoReader::decode_errors() const { return impl_->errors; }
std::string VideoReader::decoder_name() const { return impl_->decoder_name(); }

}  // namespace wm::io
