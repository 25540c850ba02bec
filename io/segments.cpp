#include "io/segments.h"

#include "io/image_output.h"
#include "io/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "io/av_handles.h"
#include "io/av_log.h"
#include "io/stream_copy.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/log.h"

namespace wm::io {
namespace {

FormatInputPtr open_input(const std::string& path) {
  install_av_log();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw InputError(path + ": " + std::strerror(errno), kExitNoInput);
  }
  AVFormatContext* raw = nullptr;
  AVDictionary* open_options = literal_name_options(path);  // "50%d.png" is one file
  int rc = avformat_open_input(&raw, path.c_str(), nullptr, &open_options);
  av_dict_free(&open_options);
  if (rc < 0) {
    const bool missing = rc == AVERROR(ENOENT) || rc == AVERROR(EACCES) || rc == AVERROR(EPERM);
    throw InputError(path + ": cannot open: " + av_error_string(rc),
                     missing ? kExitNoInput : kExitDataErr);
  }
  FormatInputPtr format(raw);
  rc = avformat_find_stream_info(format.get(), nullptr);
  if (rc < 0) {
    throw InputError(path + ": cannot read stream info: " + av_error_string(rc), kExitDataErr);
  }
  return format;
}

bool is_mov_family(const AVFormatContext* format) {
  return format->iformat && std::strstr(format->iformat->name, "mp4") != nullptr;
}

std::string extradata_of(const AVCodecParameters* par) {
  if (!par->extradata || par->extradata_size <= 0) return {};
  return std::string(reinterpret_cast<const char*>(par->extradata), size_t(par->extradata_size));
}

// Writes the concatenation; owns the temp file until it is renamed into place.
class Concatenator {
 public:
  explicit Concatenator(const ConcatConfig& config)
      : config_(config), temp_path_(fs::temp_path_for(config.output)), log_(log::get("concat")) {}

  ~Concatenator() {
    output_.reset();
    if (temp_exists_) ::unlink(temp_path_.c_str());
  }

  int64_t run() {
    if (config_.segments.empty()) {
      throw Error(config_.output + ": no segments to concatenate", kExitSoftware);
    }
    install_av_log();
    AVFormatContext* raw = nullptr;
    int rc = avformat_alloc_output_context2(&raw, nullptr, nullptr, config_.output.c_str());
    if (rc < 0 || !raw) {
      throw OutputError(config_.output + ": no container format for this file name extension",
                        kExitCantCreat);
    }
    output_.reset(raw);
    // Reproducible bytes: no random Matroska segment UID, no library version string. The same
    // segments always assemble into the same file.
    output_->flags |= AVFMT_FLAG_BITEXACT;
    FormatInputPtr first = open_segment(config_.segments.front());
    add_video_stream(first.get());
    open_source();
    open_file();
    int64_t prev_max_pts = AV_NOPTS_VALUE;
    for (size_t i = 0; i < config_.segments.size(); ++i) {
      FormatInputPtr segment = i == 0 ? std::move(first) : open_segment(config_.segments[i]);
      check_fits(segment.get(), config_.segments[i]);
      copy_segment(segment.get(), config_.segments[i], prev_max_pts);
    }
    return finish();
  }

 private:
  FormatInputPtr open_segment(const std::string& path) {
    FormatInputPtr segment = open_input(path);
    if (segment->nb_streams < 1 ||
        segment->streams[0]->codecpar->codec_type != AVMEDIA_TYPE_VIDEO) {
      throw InputError(path + ": segment has no video stream 0", kExitDataErr);
    }
    for (unsigned i = 1; i < segment->nb_streams; ++i) {
      segment->streams[i]->discard = AVDISCARD_ALL;
    }
    return segment;
  }

  void add_video_stream(AVFormatContext* first) {
    const AVStream* in = first->streams[0];
    video_ = avformat_new_stream(output_.get(), nullptr);
    if (!video_) throw std::bad_alloc();
    av_check(avcodec_parameters_copy(video_->codecpar, in->codecpar), "avcodec_parameters_copy",
             config_.output, kExitSoftware);
    video_->codecpar->codec_tag = 0;
    video_->time_base = in->time_base;
    video_->avg_frame_rate = in->avg_frame_rate;
    video_->r_frame_rate = in->r_frame_rate;
    video_->sample_aspect_ratio = in->sample_aspect_ratio;
    video_->disposition = in->disposition;
    // Rotation and HDR metadata that VideoWriter put on the segment's stream.
    for (int i = 0; i < in->nb_side_data; ++i) {
      const AVPacketSideData& sd = in->side_data[i];
      uint8_t* data = av_stream_new_side_data(video_, sd.type, sd.size);
      if (!data) throw std::bad_alloc();
      std::memcpy(data, sd.data, sd.size);
    }
    reorder_.assign(size_t(std::max(in->codecpar->video_delay, 0)) + 1, AV_NOPTS_VALUE);
    codec_id_ = in->codecpar->codec_id;
    width_ = in->codecpar->width;
    height_ = in->codecpar->height;
    format_ = in->codecpar->format;
    extradata_ = extradata_of(in->codecpar);
  }

  // Every segment must be the same stream as the first: same codec, size, pixel format and
  // parameter sets (one set of parameter sets describes the whole output stream).
  void check_fits(AVFormatContext* segment, const std::string& path) const {
    const AVCodecParameters* par = segment->streams[0]->codecpar;
    std::string problem;
    if (par->codec_id != codec_id_) {
      problem = std::string("codec ") + avcodec_get_name(par->codec_id) + " differs from " +
                avcodec_get_name(codec_id_);
    } else if (par->width != width_ || par->height != height_) {
      problem = "size " + std::to_string(par->width) + "x" + std::to_string(par->height) +
                " differs from " + std::to_string(width_) + "x" + std::to_string(height_);
    } else if (par->format != format_) {
      problem = "pixel format differs from the first segment's";
    } else if (extradata_of(par) != extradata_) {
      problem =
          "codec parameter sets differ from the first segment's (encoded with other settings)";
    }
    if (!problem.empty()) {
      throw InputError(path + ": segment does not fit " + config_.segments.front() + ": " + problem,
                       kExitDataErr);
    }
  }

  void open_source() {
    if (config_.source_path.empty() ||
        !(config_.copy_audio || config_.copy_subtitles || config_.copy_other)) {
      return;
    }
    source_ = std::make_unique<SourceCopy>(
        config_.source_path, output_.get(), video_,
        CopyChoice{config_.copy_audio, config_.copy_subtitles, config_.copy_other}, config_.output,
        log_);
  }

  void open_file() {
    const auto creation = [](int err) {
      return err == EACCES || err == EPERM || err == ENOENT || err == ENOTDIR || err == EROFS ||
             err == EISDIR;
    };
    // Created exclusively (a name someone else made there is never written through); libav
    // opens it through the descriptor.
    const int fd = fs::create_exclusive(temp_path_);
    if (fd < 0) {
      const int err = errno;
      throw OutputError(
          config_.output + ": cannot create " + temp_path_ + ": " + std::strerror(err),
          creation(err) ? kExitCantCreat : kExitIoErr);
    }
    temp_exists_ = true;
    int rc = avio_open(&output_->pb, fs::descriptor_path(fd, temp_path_).c_str(), AVIO_FLAG_WRITE);
    ::close(fd);
    if (rc < 0) {
      throw OutputError(
          config_.output + ": cannot create " + temp_path_ + ": " + av_error_string(rc),
          creation(AVUNERROR(rc)) ? kExitCantCreat : kExitIoErr);
    }
    rc = avformat_write_header(output_.get(), nullptr);
    if (rc < 0) write_failed("cannot write the header", rc);
  }

  [[noreturn]] void write_failed(const std::string& what, int rc) const {
    throw OutputError(config_.output + ": " + what + ": " + av_error_string(rc), kExitIoErr);
  }

  void write_packet(AVPacket* pkt) {
    const int rc = av_interleaved_write_frame(output_.get(), pkt);
    if (rc < 0) write_failed("write failed", rc);
  }

  void check_cancel() const {
    if (config_.cancel && config_.cancel->load()) throw Cancelled(config_.output + ": interrupted");
  }

  // Copies source packets whose timestamp is <= `ts` (in `tb`); everything when `all`.
  void copy_source_until(int64_t ts, AVRational tb, bool all) {
    source_->copy_until(ts, tb, all, [this](AVPacket* pkt) { write_packet(pkt); });
  }

  void copy_segment(AVFormatContext* segment, const std::string& path, int64_t& prev_max_pts) {
    const AVStream* in = segment->streams[0];
    PacketPtr pkt = make_packet();
    int64_t min_pts = AV_NOPTS_VALUE, max_pts = AV_NOPTS_VALUE, packets = 0;
    int rc;
    while ((rc = av_read_frame(segment, pkt.get())) >= 0) {
      if (pkt->stream_index != 0) {
        av_packet_unref(pkt.get());
        continue;
      }
      if ((++packets & 63) == 0) check_cancel();
      av_packet_rescale_ts(pkt.get(), in->time_base, video_->time_base);
      if (pkt->pts == AV_NOPTS_VALUE) {
        throw InputError(path + ": video packet without pts", kExitDataErr);
      }
      if (prev_max_pts != AV_NOPTS_VALUE && pkt->pts <= prev_max_pts) {
        throw InputError(path + ": pts " + std::to_string(pkt->pts) +
                             " overlaps the previous segment (which ends at pts " +
                             std::to_string(prev_max_pts) + ")",
                         kExitDataErr);
      }
      const int64_t derived = derive_dts(*pkt);
      if (pkt->dts == AV_NOPTS_VALUE) pkt->dts = derived;
      if (pkt->dts != AV_NOPTS_VALUE && last_dts_ != AV_NOPTS_VALUE && pkt->dts <= last_dts_) {
        throw InputError(path + ": dts " + std::to_string(pkt->dts) + " is not after " +
                             std::to_string(last_dts_) + " (segments out of order?)",
                         kExitDataErr);
      }
      if (pkt->dts != AV_NOPTS_VALUE) last_dts_ = pkt->dts;
      min_pts = min_pts == AV_NOPTS_VALUE ? pkt->pts : std::min(min_pts, pkt->pts);
      max_pts = max_pts == AV_NOPTS_VALUE ? pkt->pts : std::max(max_pts, pkt->pts);
      pkt->stream_index = video_->index;
      pkt->pos = -1;
      const int64_t t = pkt->dts != AV_NOPTS_VALUE ? pkt->dts : pkt->pts;
      if (source_) copy_source_until(t, video_->time_base, false);
      write_packet(pkt.get());
      ++frames_;
    }
    if (rc != AVERROR_EOF) {
      throw InputError(path + ": cannot read segment: " + av_error_string(rc), kExitDataErr);
    }
    if (packets == 0) throw InputError(path + ": segment holds no video", kExitDataErr);
    prev_max_pts = max_pts;
  }

  // Containers that store no dts (Matroska) hand out B-frame streams with the first packets'
  // dts unset. Derive them from the pts as libavformat's muxers do: the smallest of the last
  // video_delay + 1 pts. The buffer runs on across segments, so the derived dts stay increasing.
  int64_t derive_dts(const AVPacket& pkt) {
    const size_t n = reorder_.size();
    reorder_[0] = pkt.pts;
    for (size_t i = 1; i < n && reorder_[i] == AV_NOPTS_VALUE; ++i) {
      reorder_[i] = pkt.pts + (int64_t(i) - int64_t(n)) * std::max<int64_t>(pkt.duration, 1);
    }
    for (size_t i = 0; i + 1 < n && reorder_[i] > reorder_[i + 1]; ++i) {
      std::swap(reorder_[i], reorder_[i + 1]);
    }
    return reorder_[0];
  }

  int64_t finish() {
    check_cancel();
    if (source_) copy_source_until(AV_NOPTS_VALUE, AVRational{1, 1}, true);
    int rc = av_write_trailer(output_.get());
    if (rc < 0) write_failed("cannot write the trailer", rc);
    commit_output(output_.get(), temp_path_, config_.output, frames_, config_.before_rename);
    temp_exists_ = false;
    output_.reset();
    source_.reset();
    return frames_;
  }

  const ConcatConfig& config_;
  std::string temp_path_;
  std::shared_ptr<spdlog::logger> log_;
  FormatOutputPtr output_;
  AVStream* video_ = nullptr;
  AVCodecID codec_id_ = AV_CODEC_ID_NONE;
  int width_ = 0, height_ = 0, format_ = -1;
  std::string extradata_;
  std::unique_ptr<SourceCopy> source_;  // audio, subtitles, chapters, ...; null: none
  bool temp_exists_ = false;
  int64_t last_dts_ = AV_NOPTS_VALUE;
  std::vector<int64_t> reorder_;  // pts history for derive_dts
  int64_t frames_ = 0;
};

}  // namespace

int64_t count_video_frames(const std::string& path) {
  FormatInputPtr format = open_input(path);
  const int index = pick_video_stream(format.get());
  if (index < 0) throw InputError(path + ": no video stream", kExitDataErr);
  const AVStream* stream = format->streams[index];
  // The mp4/mov sample table already counts them (and VideoReader checks against it).
  if (is_mov_family(format.get()) && stream->nb_frames > 0) return stream->nb_frames;
  for (unsigned i = 0; i < format->nb_streams; ++i) {
    if (int(i) != index) format->streams[i]->discard = AVDISCARD_ALL;
  }
  PacketPtr pkt = make_packet();
  int64_t count = 0;
  int rc;
  while ((rc = av_read_frame(format.get(), pkt.get())) >= 0) {
    if (pkt->stream_index == index) ++count;
    av_packet_unref(pkt.get());
  }
  if (rc != AVERROR_EOF) {
    throw InputError(path + ": truncated or corrupt (read error after " + std::to_string(count) +
                         " packets: " + av_error_string(rc) + ")",
                     kExitDataErr);
  }
  return count;
}

SegmentInfo probe_segment(const std::string& path) {
  FormatInputPtr format = open_input(path);
  if (format->nb_streams < 1 || format->streams[0]->codecpar->codec_type != AVMEDIA_TYPE_VIDEO) {
    throw InputError(path + ": segment has no video stream 0", kExitDataErr);
  }
  for (unsigned i = 1; i < format->nb_streams; ++i) format->streams[i]->discard = AVDISCARD_ALL;
  const AVStream* stream = format->streams[0];
  SegmentInfo info;
  info.path = path;
  info.time_base = Rational{stream->time_base.num, stream->time_base.den};
  info.codec = avcodec_get_name(stream->codecpar->codec_id);
  info.width = stream->codecpar->width;
  info.height = stream->codecpar->height;
  info.codec_config = extradata_of(stream->codecpar);
  PacketPtr pkt = make_packet();
  bool any = false;
  int rc;
  while ((rc = av_read_frame(format.get(), pkt.get())) >= 0) {
    if (pkt->stream_index == 0) {
      ++info.frames;
      if (pkt->pts != AV_NOPTS_VALUE) {
        info.first_pts = any ? std::min(info.first_pts, pkt->pts) : pkt->pts;
        info.last_pts = any ? std::max(info.last_pts, pkt->pts) : pkt->pts;
        any = true;
      }
    }
    av_packet_unref(pkt.get());
  }
  if (rc != AVERROR_EOF) {
    throw InputError(path + ": truncated or corrupt segment: " + av_error_string(rc), kExitDataErr);
  }
  return info;
}

int64_t concat_segments(const ConcatConfig& config) {
  Concatenator concatenator(config);
  return concatenator.run();
}

}  // namespace wm::io
