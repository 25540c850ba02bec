#include "io/video_writer.h"

#include "io/output_file.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "io/av_handles.h"
#include "io/av_log.h"
#include "io/pixel_convert.h"
#include "src/base/clock.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/log.h"

extern "C" {
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
}

namespace wm::io {

namespace {

// avcodec_open2, from a thread `nice` steps nicer than the caller when nice > 0: the threads the
// encoder starts while opening inherit that thread's nice value (per thread on Linux).
int open_codec_niced(AVCodecContext* enc, const AVCodec* codec, AVDictionary** options, int nice) {
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

}  // namespace

struct VideoWriter::Impl {
  WriterConfig config;
  std::string final_path;
  std::string temp_path;
  std::shared_ptr<spdlog::logger> log;

  FormatOutputPtr output;
  AVStream* video_stream = nullptr;
  CodecContextPtr encoder;
  std::unique_ptr<PlanarToFrame> converter;
  std::vector<std::unique_ptr<PlanarToFrame>> converters;  // write_batch's other workers
  FramePtr frame = make_frame();
  PacketPtr packet = make_packet();

  // Audio/subtitle stream copy from the source: one packet read ahead.
  FormatInputPtr source;
  std::vector<int> stream_map;  // source stream index → output stream index, -1 = not copied
  PacketPtr source_packet = make_packet();
  bool source_pending = false;
  bool source_done = true;

  int64_t frames = 0;
  int64_t video_packets = 0;
  int64_t last_pts = AV_NOPTS_VALUE;
  bool temp_exists = false;
  bool finished = false;
  // A second descriptor of the temp file, for starting its writeback while it grows.
  int writeback_fd = -1;
  int64_t writeback_at = 0;
  VideoWriter::Seconds seconds;

  explicit Impl(const WriterConfig& c) : config(c), final_path(c.path) {
    install_av_log();
    temp_path = fs::temp_path_for(final_path);  // per process: see src/base/fs.h
    if (config.width <= 0 || config.height <= 0 || !valid(config.time_base)) {
      throw Error(final_path + ": writer needs a size and a time base", kExitSoftware);
    }
    check_folder();
    AVFormatContext* raw = nullptr;
    int rc = avformat_alloc_output_context2(&raw, nullptr, nullptr, final_path.c_str());
    if (rc < 0 || !raw) {
      throw OutputError(final_path + ": no container format for this file name extension",
                        kExitCantCreat);
    }
    output.reset(raw);
    open_encoder();
    add_video_stream();
    open_source();
    open_file();
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

  AVPixelFormat choose_pix_fmt(const AVCodec* codec) const {
    const EncodeSettings& settings = config.encode;
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
      return wanted;
    }
    const AVPixelFormat wanted =
        config.source.bit_depth > 8 ? AV_PIX_FMT_YUV420P10LE : AV_PIX_FMT_YUV420P;
    if (!codec->pix_fmts) return wanted;
    const AVPixelFormat nearest =
        avcodec_find_best_pix_fmt_of_list(codec->pix_fmts, wanted, 0, nullptr);
    return nearest == AV_PIX_FMT_NONE ? codec->pix_fmts[0] : nearest;
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
    encoder.reset(avcodec_alloc_context3(codec));
    if (!encoder) throw std::bad_alloc();
    AVCodecContext* enc = encoder.get();
    const AVPixelFormat pix_fmt = choose_pix_fmt(codec);
    const bool rgb = is_rgb_format(pix_fmt);
    const VideoInfo& src = config.source;
    enc->codec_type = AVMEDIA_TYPE_VIDEO;
    enc->width = config.width;
    enc->height = config.height;
    enc->pix_fmt = pix_fmt;
    enc->time_base = to_av(config.time_base);
    if (valid(config.frame_rate)) enc->framerate = to_av(config.frame_rate);
    if (valid(src.sample_aspect_ratio)) enc->sample_aspect_ratio = to_av(src.sample_aspect_ratio);
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
    std::unique_ptr<AVDictionary, AvDictionaryDeleter> options(raw_options);
    raw_options = options.release();
    const int rc = open_codec_niced(enc, codec, &raw_options, config.encode.nice);
    options.reset(raw_options);
    if (rc < 0) {
      throw AvError(final_path + ": cannot open encoder " + codec->name + " (" +
                        av_get_pix_fmt_name(pix_fmt) + "): " + av_error_string(rc),
                    rc, "avcodec_open2", kExitDataErr);
    }
    // Left over: an option neither the codec context nor the encoder knows (crf and preset are
    // only set where the encoder has them, so this is one of the job's options).
    if (const AVDictionaryEntry* e =
            av_dict_get(options.get(), "", nullptr, AV_DICT_IGNORE_SUFFIX)) {
      throw Error(final_path + ": encoder " + codec->name + " has no option '" + e->key + "'",
                  kExitDataErr);
    }
    converter =
        std::make_unique<PlanarToFrame>(config.width, config.height, pix_fmt, enc->colorspace,
                                        enc->color_range, settings.convert_threads);
    frame->format = pix_fmt;
    frame->width = config.width;
    frame->height = config.height;
    av_check(av_frame_get_buffer(frame.get(), 0), "av_frame_get_buffer", final_path, kExitSoftware);
    log->debug("{}: {} {}x{} {} time base {}/{}", final_path, codec->name, config.width,
               config.height, av_get_pix_fmt_name(pix_fmt), enc->time_base.num, enc->time_base.den);
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
    add_side_data(video_stream, AV_PKT_DATA_DISPLAYMATRIX, src.display_matrix);
    add_side_data(video_stream, AV_PKT_DATA_MASTERING_DISPLAY_METADATA, src.mastering_display);
    add_side_data(video_stream, AV_PKT_DATA_CONTENT_LIGHT_LEVEL, src.content_light);
  }

  void open_source() {
    const EncodeSettings& settings = config.encode;
    if (config.source_path.empty() || !(settings.copy_audio || settings.copy_subtitles)) return;
    AVFormatContext* raw = nullptr;
    int rc = avformat_open_input(&raw, config.source_path.c_str(), nullptr, nullptr);
    if (rc < 0) {
      const bool missing = rc == AVERROR(ENOENT) || rc == AVERROR(EACCES);
      throw InputError(config.source_path + ": " + av_error_string(rc),
                       missing ? kExitNoInput : kExitDataErr);
    }
    source.reset(raw);
    rc = avformat_find_stream_info(source.get(), nullptr);
    if (rc < 0) {
      throw InputError(config.source_path + ": cannot read stream info: " + av_error_string(rc),
                       kExitDataErr);
    }
    stream_map.assign(source->nb_streams, -1);
    for (unsigned i = 0; i < source->nb_streams; ++i) {
      AVStream* in = source->streams[i];
      const AVCodecParameters* par = in->codecpar;
      const bool audio = par->codec_type == AVMEDIA_TYPE_AUDIO && settings.copy_audio;
      const bool subtitle = par->codec_type == AVMEDIA_TYPE_SUBTITLE && settings.copy_subtitles;
      in->discard = AVDISCARD_ALL;
      if (!audio && !subtitle) continue;
      const char* name = avcodec_get_name(par->codec_id);
      // 1: yes, 0: no, < 0: the muxer cannot tell (let it try).
      if (avformat_query_codec(output->oformat, par->codec_id, FF_COMPLIANCE_NORMAL) == 0) {
        log->warn("{}: skipping {} stream #{} ({}): container {} cannot hold it", final_path,
                  audio ? "audio" : "subtitle", i, name, output->oformat->name);
        continue;
      }
      AVStream* out = avformat_new_stream(output.get(), nullptr);
      if (!out) throw std::bad_alloc();
      av_check(avcodec_parameters_copy(out->codecpar, par), "avcodec_parameters_copy", final_path,
               kExitSoftware);
      out->codecpar->codec_tag = 0;
      out->time_base = in->time_base;
      out->disposition = in->disposition;
      av_dict_copy(&out->metadata, in->metadata, 0);
      in->discard = AVDISCARD_DEFAULT;
      stream_map[i] = out->index;
    }
    // File-level tags (title, ...) as the ffmpeg CLI copies them; "encoder" is ours to write.
    av_dict_copy(&output->metadata, source->metadata, 0);
    av_dict_set(&output->metadata, "encoder", nullptr, 0);
    source_done = false;
  }

  void open_file() {
    int rc = avio_open(&output->pb, temp_path.c_str(), AVIO_FLAG_WRITE);
    if (rc < 0) {
      const int err = AVUNERROR(rc);
      throw OutputError(final_path + ": cannot create " + temp_path + ": " + av_error_string(rc),
                        is_creation_error(err) ? kExitCantCreat : kExitIoErr);
    }
    temp_exists = true;
    writeback_fd = ::open(temp_path.c_str(), O_RDONLY | O_CLOEXEC);  // -1: no early writeback
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

  // Copies source packets whose timestamp is <= `ts` (in `tb`); everything when `all`.
  void copy_source_until(int64_t ts, AVRational tb, bool all) {
    while (!source_done) {
      if (!source_pending) {
        const int rc = av_read_frame(source.get(), source_packet.get());
        if (rc < 0) {
          if (rc != AVERROR_EOF) {
            log->warn("{}: stopped copying audio/subtitles: {}: {}", final_path, config.source_path,
                      av_error_string(rc));
          }
          source_done = true;
          return;
        }
        if (stream_map[source_packet->stream_index] < 0) {
          av_packet_unref(source_packet.get());
          continue;
        }
        source_pending = true;
      }
      AVPacket* pkt = source_packet.get();
      const AVStream* in = source->streams[pkt->stream_index];
      const int64_t t = pkt->dts != AV_NOPTS_VALUE ? pkt->dts : pkt->pts;
      if (!all && t != AV_NOPTS_VALUE && ts != AV_NOPTS_VALUE &&
          av_compare_ts(t, in->time_base, ts, tb) > 0) {
        return;
      }
      AVStream* out = output->streams[stream_map[pkt->stream_index]];
      pkt->stream_index = out->index;
      av_packet_rescale_ts(pkt, in->time_base, out->time_base);
      pkt->pos = -1;
      source_pending = false;
      write_packet(pkt);  // unrefs pkt
    }
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
    f.width = config.width;
    f.height = config.height;
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

  void write(const VideoFrame& in) {
    check_open();
    check_pts(in.pts, last_pts);
    // Frame-threaded encoders may still hold the previous buffer: take a fresh one rather than
    // av_frame_make_writable(), which would copy pixels that are about to be overwritten.
    if (!av_frame_is_writable(frame.get())) new_buffer(*frame);
    const Clock::time_point start = Clock::now();
    converter->convert(in.image, *frame);
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
          config.width, config.height, encoder->pix_fmt, encoder->colorspace, encoder->color_range,
          config.encode.convert_threads));
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
        for (size_t i = w; i < in.size(); i += workers) conv.convert(in[i].image, *out[i]);
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
    commit_output(output.get(), temp_path, final_path, frames);
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

}  // namespace wm::io
