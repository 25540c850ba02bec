#include "io/video_writer.h"

#include "io/output_file.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "io/av_enum.h"
#include "io/av_handles.h"
#include "io/av_log.h"
#include "io/image_output.h"
#include "io/pixel_convert.h"
#include "io/stdin_tee.h"
#include "io/stream_copy.h"
#include "src/base/clock.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/log.h"
#include "src/base/std_streams.h"
#include "src/base/thread_name.h"

extern "C" {
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libavutil/mastering_display_metadata.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
}

namespace wm::io {

namespace {

// avcodec_open2, from a thread `nice` steps nicer than the caller when nice > 0: the threads the
// encoder starts while opening inherit that thread's nice value (per thread on Linux).
int open_codec_niced(AVCodecContext* enc, const AVCodec* codec, AVDictionary** options, int nice) {
  const ScopedThreadName role(kEncodeThreads);  // the encoder's threads start here
  if (nice <= 0) return avcodec_open2(enc, codec, options);
  int rc = 0;
  std::thread opener([&] {
    errno = 0;
    const int current = getpriority(PRIO_PROCESS, 0);  // 0: this thread (Linux)
    // Best effort: a failure only leaves the encoder at the caller's priority.
    if (errno == 0) (void)setpriority(PRIO_PROCESS, 0, std::min(current + nice, 19));
    rc = avcodec_open2(enc, codec, options);
  });
  opener.join();
  return rc;
}

AVRational to_av(Rational q) { return AVRational{q.num, q.den}; }
bool valid(Rational q) { return q.num > 0 && q.den > 0; }

bool is_creation_error(int err) {
  return err == EACCES || err == EPERM || err == ENOENT || err == ENOTDIR || err == EROFS ||
         err == EISDIR;
}

// Adds `bytes` as stream side data of `type` (libavformat takes ownership of a copy).
void add_side_data(AVStream* stream, AVPacketSideDataType type, const std::vector<uint8_t>& bytes) {
  if (bytes.empty()) return;
  uint8_t* data = av_stream_new_side_data(stream, type, bytes.size());
  if (!data) throw std::bad_alloc();
  std::memcpy(data, bytes.data(), bytes.size());
}

// Muxers that store a display matrix (libavformat 5.1: the ISO BMFF family only).
bool stores_display_matrix(const AVOutputFormat* format) {
  static const char* const kNames[] = {"mp4", "mov", "ipod", "3gp", "3g2", "ismv", "f4v", "psp"};
  for (const char* name : kNames) {
    if (std::strcmp(format->name, name) == 0) return true;
  }
  return false;
}

// "4:2:0 10-bit with alpha": what a pixel format keeps of a picture.
struct FormatTraits {
  int chroma_w = 0;  // log2 of the horizontal chroma subsampling (RGB and gray: 0)
  int chroma_h = 0;
  int depth = 8;
  bool alpha = false;
  bool gray = false;
};

FormatTraits format_traits(AVPixelFormat format) {
  FormatTraits t;
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(format);
  if (!desc) return t;
  t.gray = desc->nb_components <= 2;
  if (!(desc->flags & AV_PIX_FMT_FLAG_RGB) && !t.gray) {
    t.chroma_w = desc->log2_chroma_w;
    t.chroma_h = desc->log2_chroma_h;
  }
  t.depth = desc->comp[0].depth;
  t.alpha = has_alpha(format);
  return t;
}

std::string describe(AVPixelFormat format) {
  const FormatTraits t = format_traits(format);
  std::string chroma = t.gray ? "gray" : "4:4:4";
  if (t.chroma_w == 1 && t.chroma_h == 1) chroma = "4:2:0";
  if (t.chroma_w == 1 && t.chroma_h == 0) chroma = "4:2:2";
  if (t.chroma_w == 2 && t.chroma_h == 0) chroma = "4:1:1";
  if (t.chroma_w == 0 && t.chroma_h == 1) chroma = "4:4:0";
  return std::string(av_get_pix_fmt_name(format)) + " (" + chroma + " " + std::to_string(t.depth) +
         "-bit" + (t.alpha ? " with alpha" : "") + ")";
}

// The deprecated full-range yuvj* formats as their plain twins (the range is a tag).
AVPixelFormat plain_format(AVPixelFormat format) {
  switch (format) {
    case AV_PIX_FMT_YUVJ420P:
      return AV_PIX_FMT_YUV420P;
    case AV_PIX_FMT_YUVJ422P:
      return AV_PIX_FMT_YUV422P;
    case AV_PIX_FMT_YUVJ444P:
      return AV_PIX_FMT_YUV444P;
    case AV_PIX_FMT_YUVJ440P:
      return AV_PIX_FMT_YUV440P;
    case AV_PIX_FMT_YUVJ411P:
      return AV_PIX_FMT_YUV411P;
    default:
      return format;
  }
}

// Rotates a [C,1,H,W] image by `turns` quarter turns clockwise into `out`.
void rotate_clockwise(const Planar& in, int turns, Planar& out) {
  const int h = in.height, w = in.width;
  const int oh = turns % 2 ? w : h, ow = turns % 2 ? h : w;
  if (out.channels != in.channels || out.frames != 1 || out.height != oh || out.width != ow) {
    out = Planar(in.channels, 1, oh, ow);
  }
  for (int c = 0; c < in.channels; ++c) {
    const float* src = in.plane(c, 0);
    float* dst = out.plane(c, 0);
    for (int y = 0; y < oh; ++y) {
      float* row = dst + size_t(y) * ow;
      for (int x = 0; x < ow; ++x) {
        int sy = 0, sx = 0;
        if (turns == 1) sy = h - 1 - x, sx = y;  // clockwise: left column becomes top row
        if (turns == 2) sy = h - 1 - y, sx = w - 1 - x;
        if (turns == 3) sy = x, sx = w - 1 - y;  // counter-clockwise
        row[x] = src[size_t(sy) * w + sx];
      }
    }
  }
}

// Turns "k1=v1:k2=v2" into its keys.
bool has_param(const std::string& params, const std::string& key) {
  size_t at = 0;
  while (at <= params.size()) {
    const size_t end = std::min(params.find(':', at), params.size());
    const std::string item = params.substr(at, end - at);
    if (item.substr(0, item.find('=')) == key) return true;
    at = end + 1;
  }
  return false;
}

// x265's master-display / max-cll values from libav's side data (x265 units: chromaticities in
// 1/50000, luminance in 1/10000 cd/m²).
std::string x265_master_display(const std::vector<uint8_t>& bytes) {
  if (bytes.size() < sizeof(AVMasteringDisplayMetadata)) return {};
  AVMasteringDisplayMetadata m;
  std::memcpy(&m, bytes.data(), sizeof(m));
  if (!m.has_primaries || !m.has_luminance) return {};
  auto q = [](AVRational r, int scale) { return std::to_string(av_rescale(r.num, scale, r.den)); };
  // libav's primaries are R, G, B; x265 wants G, B, R.
  const int order[3] = {1, 2, 0};
  const char* names[3] = {"G", "B", "R"};
  std::string out;
  for (int i = 0; i < 3; ++i) {
    const AVRational* p = m.display_primaries[order[i]];
    out += std::string(names[i]) + "(" + q(p[0], 50000) + "," + q(p[1], 50000) + ")";
  }
  out += "WP(" + q(m.white_point[0], 50000) + "," + q(m.white_point[1], 50000) + ")";
  out += "L(" + q(m.max_luminance, 10000) + "," + q(m.min_luminance, 10000) + ")";
  return out;
}

std::string x265_max_cll(const std::vector<uint8_t>& bytes) {
  if (bytes.size() < sizeof(AVContentLightMetadata)) return {};
  AVContentLightMetadata light;
  std::memcpy(&light, bytes.data(), sizeof(light));
  return std::to_string(light.MaxCLL) + "," + std::to_string(light.MaxFALL);
}

}  // namespace

struct VideoWriter::Impl {
  WriterConfig config;
  std::string final_path;
  std::string temp_path;
  // Writing to standard output (kStdoutName): a stream, straight through, with no temp file,
  // verification or rename (nothing can be taken back from a pipe).
  bool to_stdout = false;
  std::shared_ptr<spdlog::logger> log;

  FormatOutputPtr output;
  AVStream* video_stream = nullptr;
  CodecContextPtr encoder;
  std::unique_ptr<PlanarToFrame> converter;
  std::vector<std::unique_ptr<PlanarToFrame>> converters;  // write_batch's other workers
  FramePtr frame = make_frame();
  PacketPtr packet = make_packet();
  // Rotation applied to the pixels (clockwise quarter turns) where the container cannot store
  // the source's display matrix; scratch images for it, one per converter.
  int turns = 0;
  std::vector<Planar> turned;
  std::vector<Planar> turned_alpha;
  // What the output cannot hold of the source, one line each (VideoWriter::dropped()).
  std::vector<std::string> dropped;

  // Audio, subtitles, chapters, attachments, cover art from the source (null: none).
  std::unique_ptr<SourceCopy> source;

  int64_t frames = 0;
  int64_t video_packets = 0;
  int64_t last_pts = AV_NOPTS_VALUE;
  bool temp_exists = false;
  bool finished = false;
  // A second descriptor of the temp file, for starting its writeback while it grows.
  int writeback_fd = -1;
  int64_t writeback_at = 0;
  VideoWriter::Seconds seconds;
  // yuv_buffer()'s pool of picture buffers (made on first use; buffers still in flight keep it
  // alive past the writer).
  struct PoolFree {
    void operator()(AVBufferPool* p) const { av_buffer_pool_uninit(&p); }
  };
  std::unique_ptr<AVBufferPool, PoolFree> yuv_pool;
  std::mutex yuv_pool_mutex;
  int yuv_linesize[4] = {0, 0, 0, 0};

  explicit Impl(const WriterConfig& c)
      : config(c), final_path(c.path), to_stdout(c.path == kStdoutName) {
    install_av_log();
    if (config.width <= 0 || config.height <= 0 || !valid(config.time_base)) {
      throw Error(final_path + ": writer needs a size and a time base", kExitSoftware);
    }
    if (!to_stdout) {
      temp_path = fs::temp_path_for(final_path);  // per process: see src/base/fs.h
      check_folder();
    } else if (config.encode.container.empty()) {
      throw Error(final_path + ": standard output needs a container (format:)", kExitSoftware);
    }
    AVFormatContext* raw = nullptr;
    // A single image: image2pipe writes it to the temp file (image2 would open the final path).
    const std::string& container = config.encode.container;
    int rc = avformat_alloc_output_context2(
        &raw, nullptr, container.empty() ? single_image_muxer(final_path) : container.c_str(),
        to_stdout ? nullptr : final_path.c_str());
    if (rc < 0 || !raw) {
      throw OutputError(
          final_path + (container.empty() ? ": no container format for this file name extension"
                                          : ": no container format " + container),
          kExitCantCreat);
    }
    output.reset(raw);
    // A constructor that throws never runs ~Impl: discard() here, or a failed header would leave
    // the temp file (and the writeback descriptor) behind.
    try {
      open_encoder();
      add_video_stream();
      open_source();
      open_file();
    } catch (...) {
      discard();
      throw;
    }
  }

  ~Impl() { discard(); }

  // Frees the muxer and removes the temp file (used on every path that does not finish).
  void discard() noexcept {
    output.reset();
    close_writeback();
    if (temp_exists) {
      ::unlink(temp_path.c_str());
      temp_exists = false;
    }
  }

  [[noreturn]] void write_failed(const std::string& what, int rc) const {
    throw OutputError(final_path + ": " + what + ": " + av_error_string(rc), kExitIoErr);
  }

  void check_folder() const {
    const std::string folder = parent_folder(final_path);
    struct stat st {};
    if (::stat(folder.c_str(), &st) != 0) {
      throw OutputError(final_path + ": output folder " + folder + ": " + std::strerror(errno),
                        kExitCantCreat);
    }
    if (!S_ISDIR(st.st_mode)) {
      throw OutputError(final_path + ": output folder " + folder + " is not a directory",
                        kExitCantCreat);
    }
    if (::access(folder.c_str(), W_OK | X_OK) != 0) {
      throw OutputError(
          final_path + ": output folder " + folder + " is not writable: " + std::strerror(errno),
          kExitCantCreat);
    }
  }

  // Notes a loss of the source's content: a warning in the log, a line in dropped().
  void drop(const std::string& what) {
    log->warn("{}: {}", final_path, what);
    dropped.push_back(what);
  }

  // The explicit pix_fmt, else the source's own when the encoder takes it, else the encoder's
  // format nearest to it (libavcodec's loss ranking: chroma, depth, alpha); a loss of chroma
  // resolution, bit depth or alpha is reported.
  AVPixelFormat choose_pix_fmt(const AVCodec* codec) {
    const EncodeSettings& settings = config.encode;
    const VideoInfo& src = config.source;
    if (!settings.pix_fmt.empty()) {
      const AVPixelFormat wanted = av_get_pix_fmt(settings.pix_fmt.c_str());
      if (wanted == AV_PIX_FMT_NONE) {
        throw OutputError(final_path + ": unknown pix_fmt " + settings.pix_fmt, kExitDataErr);
      }
      if (codec->pix_fmts) {
        bool supported = false;
        for (const AVPixelFormat* p = codec->pix_fmts; *p != AV_PIX_FMT_NONE; ++p) {
          supported = supported || *p == wanted;
        }
        if (!supported) {
          throw OutputError(final_path + ": encoder " + codec->name + " does not support pix_fmt " +
                                settings.pix_fmt,
                            kExitDataErr);
        }
      }
      if (src.alpha && !has_alpha(wanted)) {
        drop("alpha channel dropped: pix_fmt " + settings.pix_fmt + " has none");
      }
      return wanted;
    }
    AVPixelFormat source = plain_format(av_get_pix_fmt(src.pix_fmt.c_str()));
    const AVPixFmtDescriptor* source_desc = av_pix_fmt_desc_get(source);
    if (!source_desc ||
        (source_desc->flags & (AV_PIX_FMT_FLAG_HWACCEL | AV_PIX_FMT_FLAG_BITSTREAM))) {
      source = src.bit_depth > 8 ? AV_PIX_FMT_YUV420P10LE : AV_PIX_FMT_YUV420P;
    } else if (source_desc->flags & AV_PIX_FMT_FLAG_PAL) {
      // A palette image (pal8) stands for the RGB(A) it shows: libswscale cannot write palettes.
      source = src.alpha ? AV_PIX_FMT_RGBA : AV_PIX_FMT_RGB24;
    }
    if (!codec->pix_fmts) return source;
    // Candidates: what the encoder takes and libswscale writes, without the yuvj* twins.
    std::vector<AVPixelFormat> candidates;
    for (const AVPixelFormat* p = codec->pix_fmts; *p != AV_PIX_FMT_NONE; ++p) {
      if (*p == source) return source;
      const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(*p);
      if (!desc || (desc->flags & AV_PIX_FMT_FLAG_HWACCEL) || plain_format(*p) != *p ||
          !sws_isSupportedOutput(*p)) {
        continue;
      }
      candidates.push_back(*p);
    }
    if (candidates.empty()) return codec->pix_fmts[0];
    candidates.push_back(AV_PIX_FMT_NONE);
    const AVPixelFormat chosen =
        avcodec_find_best_pix_fmt_of_list(candidates.data(), source, src.alpha ? 1 : 0, nullptr);
    if (chosen == AV_PIX_FMT_NONE) return candidates.front();
    const FormatTraits from = format_traits(source), to = format_traits(chosen);
    if (src.alpha && !to.alpha) {
      drop(std::string("alpha channel dropped: encoder ") + codec->name +
           " has no pixel format with alpha");
    }
    const bool coarser = !from.gray && (to.chroma_w > from.chroma_w || to.chroma_h > from.chroma_h);
    if (coarser || to.depth < from.depth) {
      drop("pixel format " + describe(source) + " written as " + describe(chosen) + ": encoder " +
           codec->name + " has nothing closer");
    } else if (chosen != source) {
      log->info("{}: pixel format {} written as {} (encoder {})", final_path, describe(source),
                describe(chosen), codec->name);
    }
    return chosen;
  }

  // Clockwise quarter turns that show the picture upright, when the container cannot store the
  // display matrix (0 otherwise, or when there is none).
  int pixel_turns() {
    const VideoInfo& src = config.source;
    if (src.display_matrix.size() < 9 * sizeof(int32_t)) return 0;
    if (stores_display_matrix(output->oformat)) return 0;
    // The matrix rotates counter-clockwise by rotation_degrees; showing it means turning the
    // picture clockwise by that much (the ffmpeg CLI's autorotate rule).
    double theta = std::fmod(-src.rotation_degrees, 360.0);
    if (theta < 0) theta += 360.0;
    const int quarter = int(std::lround(theta / 90.0)) % 4;
    int32_t m[9];
    std::memcpy(m, src.display_matrix.data(), sizeof(m));
    const bool flipped = int64_t(m[0]) * m[4] - int64_t(m[1]) * m[3] < 0;
    if (std::fabs(theta - 90.0 * std::lround(theta / 90.0)) > 1.0 || flipped) {
      drop("display matrix (rotation " + std::to_string(src.rotation_degrees) +
           (flipped ? ", mirrored" : "") + "): container " + output->oformat->name +
           " cannot store it and only quarter turns are applied to the pixels");
      return 0;
    }
    if (quarter != 0) {
      log->info(
          "{}: container {} cannot store the display rotation: the picture is turned {} "
          "degrees clockwise instead",
          final_path, output->oformat->name, quarter * 90);
    }
    return quarter;
  }

  // x265-params with the source's HDR10 static metadata (master-display, max-cll) added, unless
  // the job's options set them; the job's other x265-params are kept.
  void add_hdr_params(const AVCodec* codec, AVDictionary** options) const {
    if (std::strcmp(codec->name, "libx265") != 0) return;
    const VideoInfo& src = config.source;
    const std::string master = x265_master_display(src.mastering_display);
    const std::string cll = x265_max_cll(src.content_light);
    if (master.empty() && cll.empty()) return;
    const AVDictionaryEntry* e = av_dict_get(*options, "x265-params", nullptr, 0);
    std::string params = e ? e->value : "";
    auto add = [&](const std::string& key, const std::string& value) {
      if (value.empty() || has_param(params, key)) return;
      params += (params.empty() ? "" : ":") + key + "=" + value;
    };
    add("master-display", master);
    add("max-cll", cll);
    av_dict_set(options, "x265-params", params.c_str(), 0);
  }

  void open_encoder() {
    const EncodeSettings& settings = config.encode;
    const AVCodec* codec = avcodec_find_encoder_by_name(settings.codec.c_str());
    if (!codec || codec->type != AVMEDIA_TYPE_VIDEO) {
      throw OutputError(final_path + ": no video encoder named " + settings.codec, kExitDataErr);
    }
    const int fits = avformat_query_codec(output->oformat, codec->id, FF_COMPLIANCE_NORMAL);
    if (fits == 0) {
      throw OutputError(final_path + ": container " + output->oformat->name + " cannot hold " +
                            codec->name + " video",
                        kExitCantCreat);
    }
    log = wm::log::get(std::string("enc:") + codec->name);
    const AVPixelFormat pix_fmt = choose_pix_fmt(codec);
    turns = pixel_turns();
    // The picture as encoded: turned, then (only where the encoder requires it) cropped to its
    // chroma subsampling.
    const int width = turns % 2 ? config.height : config.width;
    const int height = turns % 2 ? config.width : config.height;
    int rc = open_codec(codec, pix_fmt, width, height, /*quiet=*/true);
    const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(pix_fmt);
    const int even_w = width & ~((1 << desc->log2_chroma_w) - 1);
    const int even_h = height & ~((1 << desc->log2_chroma_h) - 1);
    if (rc < 0 && (even_w != width || even_h != height) && even_w > 0 && even_h > 0) {
      const int retry = open_codec(codec, pix_fmt, even_w, even_h, /*quiet=*/false);
      if (retry >= 0) {
        log->warn(
            "{}: output {}x{} cropped to {}x{}: encoder {} needs sizes that are multiples "
            "of its {} chroma subsampling",
            final_path, width, height, even_w, even_h, codec->name, av_get_pix_fmt_name(pix_fmt));
        dropped.push_back("last " + std::string(even_w != width ? "column" : "") +
                          (even_w != width && even_h != height ? " and " : "") +
                          (even_h != height ? "row" : "") + " of pixels: encoder " + codec->name +
                          " needs even sizes for " + av_get_pix_fmt_name(pix_fmt));
      }
      rc = retry;
    } else if (rc < 0) {
      rc = open_codec(codec, pix_fmt, width, height, /*quiet=*/false);  // again, to log why
    }
    if (rc < 0) {
      throw AvError(final_path + ": cannot open encoder " + codec->name + " (" +
                        av_get_pix_fmt_name(pix_fmt) + "): " + av_error_string(rc),
                    rc, "avcodec_open2", kExitDataErr);
    }
    AVCodecContext* enc = encoder.get();
    converter = std::make_unique<PlanarToFrame>(enc->width, enc->height, pix_fmt, enc->colorspace,
                                                enc->color_range, settings.convert_threads);
    converter->crop_from(width, height);
    frame->format = pix_fmt;
    frame->width = enc->width;
    frame->height = enc->height;
    av_check(av_frame_get_buffer(frame.get(), 0), "av_frame_get_buffer", final_path, kExitSoftware);
    log->debug("{}: {} {}x{} {} time base {}/{}", final_path, codec->name, enc->width, enc->height,
               av_get_pix_fmt_name(pix_fmt), enc->time_base.num, enc->time_base.den);
  }

  // Opens the encoder at width x height (a fresh context each time); returns avcodec_open2's
  // code. `quiet`: libav's lines about a failure go to the debug level (a retry follows).
  // Options the encoder does not know throw.
  int open_codec(const AVCodec* codec, AVPixelFormat pix_fmt, int width, int height, bool quiet) {
    const EncodeSettings& settings = config.encode;
    encoder.reset(avcodec_alloc_context3(codec));
    if (!encoder) throw std::bad_alloc();
    AVCodecContext* enc = encoder.get();
    const bool rgb = is_rgb_format(pix_fmt);
    const VideoInfo& src = config.source;
    enc->codec_type = AVMEDIA_TYPE_VIDEO;
    enc->width = width;
    enc->height = height;
    enc->pix_fmt = pix_fmt;
    enc->time_base = to_av(config.time_base);
    if (valid(config.frame_rate)) enc->framerate = to_av(config.frame_rate);
    if (valid(src.sample_aspect_ratio)) {
      enc->sample_aspect_ratio = to_av(src.sample_aspect_ratio);
      if (turns % 2) std::swap(enc->sample_aspect_ratio.num, enc->sample_aspect_ratio.den);
    }
    // Interlaced sources keep their fields unless the reader deinterlaced them.
    const bool interlaced = !src.deinterlaced && src.field_order >= AV_FIELD_TT &&
                            src.field_order <= AV_FIELD_BT && turns % 2 == 0;
    // Progressive when known (deinterlaced, or so flagged); a turned interlaced picture is neither.
    const bool progressive =
        src.deinterlaced || (src.field_order == AV_FIELD_PROGRESSIVE && turns % 2 == 0);
    enc->field_order = progressive  ? AV_FIELD_PROGRESSIVE
                       : interlaced ? AVFieldOrder(src.field_order)
                                    : AV_FIELD_UNKNOWN;
    if (interlaced) enc->flags |= AV_CODEC_FLAG_INTERLACED_DCT | AV_CODEC_FLAG_INTERLACED_ME;
    if (quiet) enc->log_level_offset = AV_LOG_DEBUG - AV_LOG_ERROR;
    enc->color_primaries = AVColorPrimaries(src.color_primaries);
    enc->color_trc = AVColorTransferCharacteristic(src.color_trc);
    enc->colorspace = rgb ? AVCOL_SPC_RGB : AVColorSpace(src.colorspace);
    if (rgb) {
      enc->color_range = AVCOL_RANGE_JPEG;
    } else {
      enc->color_range = src.color_range == AVCOL_RANGE_JPEG ? AVCOL_RANGE_JPEG : AVCOL_RANGE_MPEG;
    }
    enc->thread_count = settings.threads;
    if (output->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;

    AVDictionary* raw_options = nullptr;
    // crf/preset apply to encoders that have them (libx264, libx265); others ignore them.
    if (codec->priv_class) {
      const void* klass = &codec->priv_class;
      if (settings.crf >= 0 &&
          av_opt_find(const_cast<void*>(klass), "crf", nullptr, 0, AV_OPT_SEARCH_FAKE_OBJ)) {
        av_dict_set(&raw_options, "crf", std::to_string(settings.crf).c_str(), 0);
      }
      if (!settings.preset.empty() &&
          av_opt_find(const_cast<void*>(klass), "preset", nullptr, 0, AV_OPT_SEARCH_FAKE_OBJ)) {
        av_dict_set(&raw_options, "preset", settings.preset.c_str(), 0);
      }
    }
    for (const auto& [key, value] : settings.options) {
      av_dict_set(&raw_options, key.c_str(), value.c_str(), 0);
    }
    add_hdr_params(codec, &raw_options);
    std::unique_ptr<AVDictionary, AvDictionaryDeleter> options(raw_options);
    raw_options = options.release();
    const int rc = open_codec_niced(enc, codec, &raw_options, config.encode.nice);
    options.reset(raw_options);
    enc->log_level_offset = 0;
    if (rc < 0) return rc;
    // Left over: an option neither the codec context nor the encoder knows (crf and preset are
    // only set where the encoder has them, so this is one of the job's options).
    if (const AVDictionaryEntry* e =
            av_dict_get(options.get(), "", nullptr, AV_DICT_IGNORE_SUFFIX)) {
      throw Error(final_path + ": encoder " + codec->name + " has no option '" + e->key + "'",
                  kExitDataErr);
    }
    return rc;
  }

  void add_video_stream() {
    video_stream = avformat_new_stream(output.get(), nullptr);
    if (!video_stream) throw std::bad_alloc();
    av_check(avcodec_parameters_from_context(video_stream->codecpar, encoder.get()),
             "avcodec_parameters_from_context", final_path, kExitSoftware);
    video_stream->time_base = encoder->time_base;
    if (valid(config.frame_rate)) video_stream->avg_frame_rate = to_av(config.frame_rate);
    video_stream->sample_aspect_ratio = encoder->sample_aspect_ratio;
    const VideoInfo& src = config.source;
    if (turns == 0) add_side_data(video_stream, AV_PKT_DATA_DISPLAYMATRIX, src.display_matrix);
    add_side_data(video_stream, AV_PKT_DATA_MASTERING_DISPLAY_METADATA, src.mastering_display);
    add_side_data(video_stream, AV_PKT_DATA_CONTENT_LIGHT_LEVEL, src.content_light);
    // libavcodec 5.1's encoders take neither from frames: what is dynamic is lost.
    if (src.hdr10_plus) {
      drop(std::string("HDR10+ dynamic metadata: encoder ") + encoder->codec->name +
           " cannot write it (the HDR10 static metadata is kept)");
    }
    if (src.dolby_vision) {
      drop(std::string("Dolby Vision metadata: encoder ") + encoder->codec->name +
           " cannot write it (the base layer's HDR10 metadata is kept)");
    }
  }

  void open_source() {
    const EncodeSettings& settings = config.encode;
    if (config.source_path.empty() ||
        !(settings.copy_audio || settings.copy_subtitles || settings.copy_other)) {
      return;
    }
    if (std::strcmp(output->oformat->name, "yuv4mpegpipe") == 0) return drop_all_streams();
    if (config.source_path == kStdinName && !stdin_from_start()) {
      return drop_all_streams(" of standard input: its start is no longer kept (read more than " +
                              std::to_string(kRetainBytes >> 20) +
                              " MiB before the output opened)");
    }
    source = std::make_unique<SourceCopy>(
        config.source_path, output.get(), video_stream,
        CopyChoice{settings.copy_audio, settings.copy_subtitles, settings.copy_other}, final_path,
        log);
    dropped.insert(dropped.end(), source->dropped().begin(), source->dropped().end());
  }

  // Copies source packets whose timestamp is <= `ts` (in `tb`); everything when `all`.
  void copy_source_until(int64_t ts, AVRational tb, bool all) {
    if (source) source->copy_until(ts, tb, all, [this](AVPacket* pkt) { write_packet(pkt); });
  }

  // The source's audio and subtitles, which the output cannot take: a Y4M stream holds one video
  // stream; standard input whose start is no longer kept (io/stdin_tee.h) cannot be read again.
  void drop_all_streams(const std::string& why =
                            ": container yuv4mpegpipe holds one video "
                            "stream") {
    const VideoInfo& src = config.source;
    if (config.encode.copy_audio && src.audio_streams > 0) {
      drop(std::to_string(src.audio_streams) + " audio stream(s)" + why);
    }
    if (config.encode.copy_subtitles && src.subtitle_streams > 0) {
      drop(std::to_string(src.subtitle_streams) + " subtitle stream(s)" + why);
    }
  }

  void open_file() {
    if (to_stdout) {
      const int rc = avio_open(&output->pb, kStdoutName, AVIO_FLAG_WRITE);
      if (rc < 0) {
        throw OutputError(final_path + ": cannot write standard output: " + av_error_string(rc),
                          kExitCantCreat);
      }
      // A live stream: no seeking back to patch a header, packets flushed as they come.
      output->flags |= AVFMT_FLAG_FLUSH_PACKETS;
      const int header = avformat_write_header(output.get(), nullptr);
      if (header < 0) write_failed("cannot write the header", header);
      return;
    }
    // Created exclusively (a name someone else made there is never written through), then
    // opened by libav through the descriptor; which also serves the early writeback.
    writeback_fd = fs::create_exclusive(temp_path);
    if (writeback_fd < 0) {
      const int err = errno;
      throw OutputError(final_path + ": cannot create " + temp_path + ": " + std::strerror(err),
                        is_creation_error(err) ? kExitCantCreat : kExitIoErr);
    }
    temp_exists = true;
    const std::string name = fs::descriptor_path(writeback_fd, temp_path);
    int rc = avio_open(&output->pb, name.c_str(), AVIO_FLAG_WRITE);
    if (rc < 0) {
      const int err = AVUNERROR(rc);
      throw OutputError(final_path + ": cannot create " + temp_path + ": " + av_error_string(rc),
                        is_creation_error(err) ? kExitCantCreat : kExitIoErr);
    }
    AVDictionary* raw_options = nullptr;
    const std::string muxer = output->oformat->name;
    if (config.exact_timescale && (muxer == "mp4" || muxer == "mov")) {
      const std::string scale = std::to_string(config.time_base.den);
      av_dict_set(&raw_options, "movie_timescale", scale.c_str(), 0);
      av_dict_set(&raw_options, "video_track_timescale", scale.c_str(), 0);
    }
    rc = avformat_write_header(output.get(), &raw_options);
    av_dict_free(&raw_options);
    if (rc < 0) write_failed("cannot write the header", rc);
  }

  void write_packet(AVPacket* pkt) {
    const int rc = av_interleaved_write_frame(output.get(), pkt);
    if (rc < 0) write_failed("write failed", rc);
    start_writeback();
  }

  // Every 8 MiB, asks the kernel to start writing the file out (without waiting), so that
  // finish()'s fsync waits for the tail only instead of the whole file at once. A hint: write
  // errors are fsync's to report.
  void start_writeback() {
    constexpr int64_t kStep = int64_t(8) << 20;
    if (writeback_fd < 0 || !output->pb) return;
    const int64_t at = avio_tell(output->pb);
    if (at - writeback_at < kStep) return;
    writeback_at = at;
#ifdef __linux__
    ::sync_file_range(writeback_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#endif
  }

  void close_writeback() noexcept {
    if (writeback_fd >= 0) ::close(writeback_fd);
    writeback_fd = -1;
  }

  void drain_encoder() {
    for (;;) {
      const int rc = avcodec_receive_packet(encoder.get(), packet.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
      if (rc < 0) {
        throw AvError(final_path + ": encoding failed: " + av_error_string(rc), rc,
                      "avcodec_receive_packet", kExitSoftware);
      }
      packet->stream_index = video_stream->index;
      av_packet_rescale_ts(packet.get(), encoder->time_base, video_stream->time_base);
      copy_source_until(packet->dts, video_stream->time_base, false);
      write_packet(packet.get());
      ++video_packets;
    }
  }

  void check_open() const {
    if (finished) throw Error(final_path + ": writer used after finish()", kExitSoftware);
    if (!output) throw Error(final_path + ": writer used after a failure", kExitSoftware);
  }

  void check_pts(int64_t pts, int64_t after) const {
    if (after != AV_NOPTS_VALUE && pts <= after) {
      throw Error(final_path + ": frame pts " + std::to_string(pts) + " is not after " +
                      std::to_string(after),
                  kExitSoftware);
    }
  }

  // A fresh frame buffer in the encoder's format.
  void new_buffer(AVFrame& f) const {
    av_frame_unref(&f);
    f.format = encoder->pix_fmt;
    f.width = encoder->width;
    f.height = encoder->height;
    av_check(av_frame_get_buffer(&f, 0), "av_frame_get_buffer", final_path, kExitSoftware);
  }

  // Sends a converted frame with `in`'s timing and the stream's colour tags.
  void send(AVFrame& f, const VideoFrame& in) {
    f.pts = in.pts;
    f.pkt_duration = in.duration;
    f.pict_type = AV_PICTURE_TYPE_NONE;
    f.color_primaries = encoder->color_primaries;
    f.color_trc = encoder->color_trc;
    f.colorspace = encoder->colorspace;
    f.color_range = encoder->color_range;
    f.sample_aspect_ratio = encoder->sample_aspect_ratio;
    const AVFieldOrder order = encoder->field_order;
    f.interlaced_frame = order >= AV_FIELD_TT && order <= AV_FIELD_BT;
    f.top_field_first = order == AV_FIELD_TT || order == AV_FIELD_BT;
    const Clock::time_point start = Clock::now();
    const int rc = avcodec_send_frame(encoder.get(), &f);
    if (rc < 0) {
      throw AvError(final_path + ": encoding failed: " + av_error_string(rc), rc,
                    "avcodec_send_frame", kExitSoftware);
    }
    last_pts = in.pts;
    ++frames;
    drain_encoder();
    seconds.encode += seconds_since(start);
  }

  // Converts `in` (turned first where the rotation goes into the pixels; its alpha, if any, too)
  // with `conv`; `slot` names the scratch images of the calling worker.
  void convert_with(PlanarToFrame& conv, size_t slot, const VideoFrame& in, AVFrame& out) {
    const Planar* image = &in.image;
    const Planar* alpha = in.alpha.empty() ? nullptr : &in.alpha;
    if (turns) {
      rotate_clockwise(in.image, turns, turned[slot]);
      image = &turned[slot];
      if (alpha) {
        rotate_clockwise(in.alpha, turns, turned_alpha[slot]);
        alpha = &turned_alpha[slot];
      }
    }
    conv.convert(*image, out, alpha);
  }

  void write(const VideoFrame& in) {
    check_open();
    if (turned.empty()) {
      turned.resize(1);
      turned_alpha.resize(1);
    }
    check_pts(in.pts, last_pts);
    // Frame-threaded encoders may still hold the previous buffer: take a fresh one rather than
    // av_frame_make_writable(), which would copy pixels that are about to be overwritten.
    if (!av_frame_is_writable(frame.get())) new_buffer(*frame);
    const Clock::time_point start = Clock::now();
    convert_with(*converter, 0, in, *frame);
    seconds.convert += seconds_since(start);
    send(*frame, in);
  }

  void write_batch(const std::vector<VideoFrame>& in) {
    check_open();
    for (size_t i = 0; i < in.size(); ++i) check_pts(in[i].pts, i ? in[i - 1].pts : last_pts);
    const size_t workers = std::min(in.size(), size_t(std::max(1, config.encode.convert_workers)));
    if (workers <= 1) {
      for (const VideoFrame& f : in) write(f);
      return;
    }
    while (converters.size() < workers - 1) {
      converters.push_back(std::make_unique<PlanarToFrame>(
          encoder->width, encoder->height, encoder->pix_fmt, encoder->colorspace,
          encoder->color_range, config.encode.convert_threads));
      converters.back()->crop_from(turns % 2 ? config.height : config.width,
                                   turns % 2 ? config.width : config.height);
    }
    if (turned.size() < workers) {
      turned.resize(workers);
      turned_alpha.resize(workers);
    }
    const Clock::time_point start = Clock::now();
    std::vector<FramePtr> out(in.size());
    for (FramePtr& f : out) {
      f = make_frame();
      new_buffer(*f);
    }
    // Worker w converts frames w, w + workers, ... with its own converter (converter, then
    // converters[w - 1]): each frame gets the same pixels as write() would give it.
    std::vector<std::exception_ptr> failed(workers);
    auto work = [&](size_t w) {
      try {
        PlanarToFrame& conv = w == 0 ? *converter : *converters[w - 1];
        for (size_t i = w; i < in.size(); i += workers) convert_with(conv, w, in[i], *out[i]);
      } catch (...) {
        failed[w] = std::current_exception();
      }
    };
    std::vector<std::thread> threads;
    for (size_t w = 1; w < workers; ++w) threads.emplace_back(work, w);
    work(0);
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : failed) {
      if (e) std::rethrow_exception(e);
    }
    seconds.convert += seconds_since(start);
    for (size_t i = 0; i < in.size(); ++i) send(*out[i], in[i]);
  }

  bool accepts_yuv(int format, int colorspace, int color_range, int source_height) const {
    const AVCodecContext* enc = encoder.get();
    if (!enc || !yuv_native_format(format) || enc->pix_fmt != format || turns != 0 ||
        enc->width != config.width || enc->height != config.height) {
      return false;
    }
    // The reader's rule (pixel_convert.cpp) for the source, the writer's for the output.
    const bool source_full = color_range == AVCOL_RANGE_JPEG;
    const bool output_full = enc->color_range == AVCOL_RANGE_JPEG;
    return source_full == output_full && effective_colorspace(colorspace, source_height) ==
                                             effective_colorspace(enc->colorspace, enc->height);
  }

  YuvImage yuv_buffer() {
    const AVCodecContext* enc = encoder.get();
    const AVPixelFormat format = enc->pix_fmt;
    const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(format);
    {
      std::lock_guard<std::mutex> lock(yuv_pool_mutex);
      int size = 0;
      if (!yuv_pool) {
        av_check(av_image_fill_linesizes(yuv_linesize, format, FFALIGN(enc->width, 64)),
                 "av_image_fill_linesizes", final_path, kExitSoftware);
        uint8_t* none[4] = {nullptr, nullptr, nullptr, nullptr};
        size = av_image_fill_pointers(none, format, enc->height, nullptr, yuv_linesize);
        av_check(size, "av_image_fill_pointers", final_path, kExitSoftware);
        yuv_pool.reset(av_buffer_pool_init(size_t(size) + 64, av_buffer_alloc));
        if (!yuv_pool) throw std::bad_alloc();
      }
    }
    AVFrame* f = av_frame_alloc();
    if (!f) throw std::bad_alloc();
    YuvImage image;
    image.owner = std::shared_ptr<AVFrame>(f, [](AVFrame* p) { av_frame_free(&p); });
    f->format = format;
    f->width = enc->width;
    f->height = enc->height;
    f->buf[0] = av_buffer_pool_get(yuv_pool.get());
    if (!f->buf[0]) throw std::bad_alloc();
    av_check(av_image_fill_pointers(f->data, format, enc->height, f->buf[0]->data, yuv_linesize),
             "av_image_fill_pointers", final_path, kExitSoftware);
    image.width = enc->width;
    image.height = enc->height;
    image.format = format;
    image.depth = desc->comp[0].depth;
    image.chroma_shift_x = desc->log2_chroma_w;
    image.chroma_shift_y = desc->log2_chroma_h;
    image.colorspace = enc->colorspace;
    image.color_range = enc->color_range;
    for (int p = 0; p < 3; ++p) {
      f->linesize[p] = yuv_linesize[p];
      image.data[p] = f->data[p];
      image.stride[p] = yuv_linesize[p];
    }
    return image;
  }

  void write_yuv(const VideoFrame& timing, const YuvImage& image) {
    check_open();
    check_pts(timing.pts, last_pts);
    auto* f = static_cast<AVFrame*>(image.owner.get());
    if (!f || f->format != encoder->pix_fmt || f->width != encoder->width ||
        f->height != encoder->height) {
      throw Error(final_path + ": write_yuv takes pictures from yuv_buffer()", kExitSoftware);
    }
    send(*f, timing);
  }

  bool yuv_target(VideoWriter::YuvTarget& out) const {
    const AVCodecContext* enc = encoder.get();
    if (!enc || !yuv_native_format(enc->pix_fmt) || turns != 0) return false;
    const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(enc->pix_fmt);
    out.format = enc->pix_fmt;
    out.width = enc->width;
    out.height = enc->height;
    out.depth = desc->comp[0].depth;
    out.chroma_shift_x = desc->log2_chroma_w;
    out.chroma_shift_y = desc->log2_chroma_h;
    out.colorspace = effective_colorspace(enc->colorspace, enc->height);
    out.full_range = enc->color_range == AVCOL_RANGE_JPEG;
    return true;
  }

  void write_planes(const VideoFrame& timing, const YuvImage& image) {
    check_open();
    check_pts(timing.pts, last_pts);
    if (image.format != encoder->pix_fmt || image.width != encoder->width ||
        image.height != encoder->height || image.semi_planar || !image.owner) {
      throw Error(final_path + ": write_planes takes pictures of the encoder's format and size",
                  kExitSoftware);
    }
    FramePtr f = make_frame();
    f->format = image.format;
    f->width = image.width;
    f->height = image.height;
    // The picture's memory stays where it is: the frame's buffer holds a reference to its owner
    // and drops it when libavcodec lets the frame go.
    // (The buffer stands for the whole picture; its size is the luma plane's.)
    auto* owner = new std::shared_ptr<void>(image.owner);
    f->buf[0] = av_buffer_create(
        image.data[0], size_t(std::max<std::ptrdiff_t>(image.stride[0], 1)) * size_t(image.height),
        [](void* opaque, uint8_t*) { delete static_cast<std::shared_ptr<void>*>(opaque); }, owner,
        0);
    if (!f->buf[0]) {
      delete owner;
      throw std::bad_alloc();
    }
    for (int p = 0; p < 3; ++p) {
      f->data[p] = image.data[p];
      f->linesize[p] = int(image.stride[p]);
    }
    send(*f, timing);
  }

  int64_t finish() {
    if (finished) return frames;
    check_open();
    const Clock::time_point start = Clock::now();
    int rc = avcodec_send_frame(encoder.get(), nullptr);
    if (rc < 0 && rc != AVERROR_EOF) write_failed("flushing the encoder", rc);
    drain_encoder();
    copy_source_until(AV_NOPTS_VALUE, AVRational{1, 1}, true);
    rc = av_write_trailer(output.get());
    if (rc < 0) write_failed("cannot write the trailer", rc);
    if (video_packets != frames) {
      throw OutputError(final_path + ": verify failed: " + std::to_string(video_packets) +
                            " video packets muxed, " + std::to_string(frames) + " frames written",
                        kExitIoErr);
    }
    const Clock::time_point flushed = Clock::now();
    close_writeback();
    if (to_stdout) {
      avio_flush(output->pb);
      if (output->pb->error < 0) write_failed("write failed", output->pb->error);
    } else {
      commit_output(output.get(), temp_path, final_path, frames);
    }
    temp_exists = false;
    seconds.flush = std::chrono::duration<double>(flushed - start).count();
    seconds.commit = seconds_since(flushed);
    finished = true;
    source.reset();
    output.reset();
    log->debug("{}: {} frames", final_path, frames);
    return frames;
  }
};

Planar resize_alpha(const Planar& alpha, int width, int height) {
  if (alpha.width == width && alpha.height == height) return alpha.clone();
  SwsContextPtr sws(sws_getContext(alpha.width, alpha.height, AV_PIX_FMT_GRAYF32, width, height,
                                   AV_PIX_FMT_GRAYF32, SWS_BICUBIC | SWS_ACCURATE_RND, nullptr,
                                   nullptr, nullptr));
  if (!sws) throw Error("cannot resize an alpha plane", kExitSoftware);
  Planar out(1, 1, height, width);
  const uint8_t* src[4] = {reinterpret_cast<const uint8_t*>(alpha.plane(0, 0))};
  const int src_stride[4] = {int(alpha.width * sizeof(float))};
  uint8_t* dst[4] = {reinterpret_cast<uint8_t*>(out.plane(0, 0))};
  const int dst_stride[4] = {int(width * sizeof(float))};
  sws_scale(sws.get(), src, src_stride, 0, alpha.height, dst, dst_stride);
  for (float& v : out.data) v = std::min(1.0f, std::max(0.0f, v));
  return out;
}

VideoWriter::VideoWriter(const WriterConfig& config) : impl_(std::make_unique<Impl>(config)) {}
VideoWriter::~VideoWriter() = default;
VideoWriter::VideoWriter(VideoWriter&&) noexcept = default;
VideoWriter& VideoWriter::operator=(VideoWriter&&) noexcept = default;

void VideoWriter::write_batch(const std::vector<VideoFrame>& frames) {
  try {
    impl_->write_batch(frames);
  } catch (...) {
    impl_->discard();
    throw;
  }
}

bool VideoWriter::accepts_yuv(int format, int colorspace, int color_range,
                              int source_height) const {
  return impl_->accepts_yuv(format, colorspace, color_range, source_height);
}

YuvImage VideoWriter::yuv_buffer() { return impl_->yuv_buffer(); }

bool VideoWriter::yuv_target(YuvTarget& out) const { return impl_->yuv_target(out); }

void VideoWriter::write_planes(const VideoFrame& timing, const YuvImage& image) {
  try {
    impl_->write_planes(timing, image);
  } catch (...) {
    impl_->discard();
    throw;
  }
}

void VideoWriter::write_yuv(const VideoFrame& timing, const YuvImage& image) {
  try {
    impl_->write_yuv(timing, image);
  } catch (...) {
    impl_->discard();
    throw;
  }
}

void VideoWriter::write(const VideoFrame& frame) {
  try {
    impl_->write(frame);
  } catch (...) {
    impl_->discard();
    throw;
  }
}

VideoWriter::Seconds VideoWriter::seconds() const { return impl_->seconds; }

int64_t VideoWriter::finish() {
  try {
    return impl_->finish();
  } catch (...) {
    impl_->discard();
    throw;
  }
}

int64_t VideoWriter::frames_written() const { return impl_->frames; }

std::vector<std::string> VideoWriter::dropped() const { return impl_->dropped; }

}  // namespace wm::io
