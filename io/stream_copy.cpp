#include "io/stream_copy.h"

#include <algorithm>
#include <cstring>

#include "io/image_output.h"
#include "io/output_file.h"
#include "io/stdin_tee.h"
#include "src/base/error.h"
#include "src/base/log.h"
#include "src/base/std_streams.h"

namespace wm::io {
namespace {

bool muxer_is(const AVFormatContext* output, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (std::strcmp(output->oformat->name, name) == 0) return true;
  }
  return false;
}

bool is_mov_family(const AVFormatContext* output) {
  return muxer_is(output, {"mp4", "mov", "ipod", "3gp", "3g2", "ismv", "f4v", "psp"});
}

const char* media_name(AVMediaType type) {
  switch (type) {
    case AVMEDIA_TYPE_VIDEO:
      return "video";
    case AVMEDIA_TYPE_AUDIO:
      return "audio";
    case AVMEDIA_TYPE_SUBTITLE:
      return "subtitle";
    case AVMEDIA_TYPE_DATA:
      return "data";
    case AVMEDIA_TYPE_ATTACHMENT:
      return "attachment";
    default:
      return "unknown";
  }
}

}  // namespace

SourceCopy::SourceCopy(const std::string& source_path, AVFormatContext* output, AVStream* video,
                       const CopyChoice& choice, const std::string& output_name,
                       std::shared_ptr<spdlog::logger> log)
    : source_path_(source_path),
      output_name_(output_name),
      output_(output),
      choice_(choice),
      log_(std::move(log)) {
  AVFormatContext* raw = nullptr;
  if (source_path == kStdinName) {
    stdin_io_ = open_stdin();
    raw = avformat_alloc_context();
    if (!stdin_io_ || !raw) {
      avformat_free_context(raw);
      close_stdin(stdin_io_);
      throw InputError(source_path + ": standard input cannot be read again from its start",
                       kExitSoftware);
    }
    raw->pb = stdin_io_;
    raw->flags |= AVFMT_FLAG_CUSTOM_IO;
  }
  AVDictionary* open_options = literal_name_options(source_path);  // "50%d.png" is one file
  int rc = avformat_open_input(&raw, source_path.c_str(), nullptr, &open_options);
  av_dict_free(&open_options);
  if (rc < 0) {
    const bool missing = rc == AVERROR(ENOENT) || rc == AVERROR(EACCES);
    throw InputError(source_path + ": " + av_error_string(rc),
                     missing ? kExitNoInput : kExitDataErr);
  }
  source_.reset(raw);
  rc = avformat_find_stream_info(source_.get(), nullptr);
  if (rc < 0) {
    throw InputError(source_path + ": cannot read stream info: " + av_error_string(rc),
                     kExitDataErr);
  }
  stream_map_.assign(source_->nb_streams, -1);
  const int main_video = pick_video_stream(source_.get());
  if (video && main_video >= 0) copy_video_tags(video, main_video);
  for (unsigned i = 0; i < source_->nb_streams; ++i) {
    AVStream* in = source_->streams[i];
    const AVCodecParameters* par = in->codecpar;
    const bool copy = int(i) != main_video && copyable(i, in);
    in->discard = AVDISCARD_ALL;
    if (!copy) continue;
    AVStream* out = avformat_new_stream(output_, nullptr);
    if (!out) throw std::bad_alloc();
    av_check(avcodec_parameters_copy(out->codecpar, par), "avcodec_parameters_copy", output_name_,
             kExitSoftware);
    out->codecpar->codec_tag = 0;
    out->time_base = in->time_base;
    out->disposition = in->disposition;
    av_dict_copy(&out->metadata, in->metadata, 0);
    in->discard = AVDISCARD_DEFAULT;
    stream_map_[i] = out->index;
  }
  if (choice_.other) copy_chapters();
  // File-level tags (title, ...) as the ffmpeg CLI copies them; "encoder" is the muxer's.
  av_dict_copy(&output_->metadata, source_->metadata, 0);
  av_dict_set(&output_->metadata, "encoder", nullptr, 0);
  // No stream to copy: no packet to read (copy_until would read the whole source for none; on
  // standard input, keeping every byte of it until then).
  if (std::all_of(stream_map_.begin(), stream_map_.end(), [](int out) { return out < 0; })) {
    done_ = true;
    source_.reset();
    close_stdin(stdin_io_);
    stdin_io_ = nullptr;
  }
}

SourceCopy::~SourceCopy() {
  source_.reset();
  close_stdin(stdin_io_);
}

void SourceCopy::drop(const std::string& what) {
  log_->warn("{}: {}", output_name_, what);
  dropped_.push_back(what);
}

// The video stream's own tags (title, language, timecode, ...), not a muxer's statistics.
void SourceCopy::copy_video_tags(AVStream* video, int main_video) {
  const AVDictionaryEntry* e = nullptr;
  while ((e = av_dict_get(source_->streams[main_video]->metadata, "", e, AV_DICT_IGNORE_SUFFIX))) {
    const std::string key = e->key;
    if (key == "encoder" || key == "DURATION" || key == "NUMBER_OF_FRAMES" ||
        key == "NUMBER_OF_BYTES" || key == "BPS" || key.rfind("_STATISTICS", 0) == 0) {
      continue;
    }
    av_dict_set(&video->metadata, e->key, e->value, 0);
  }
}

bool SourceCopy::copyable(unsigned index, const AVStream* in) {
  const AVCodecParameters* par = in->codecpar;
  const std::string what = std::string(media_name(par->codec_type)) + " stream #" +
                           std::to_string(index) + " (" + avcodec_get_name(par->codec_id) + ")";
  const std::string muxer = output_->oformat->name;
  // Streams the demuxer itself discards stand for something it exposes otherwise (mov's chapter
  // text track: the chapters).
  if (in->discard == AVDISCARD_ALL) {
    log_->debug("{}: {} of {} not copied: the demuxer discards it", output_name_, what,
                source_path_);
    return false;
  }
  switch (par->codec_type) {
    case AVMEDIA_TYPE_AUDIO:
      if (!choice_.audio) return false;
      break;
    case AVMEDIA_TYPE_SUBTITLE:
      if (!choice_.subtitles) return false;
      break;
    case AVMEDIA_TYPE_ATTACHMENT:
      if (!choice_.other) return false;
      if (muxer != "matroska") {
        const AVDictionaryEntry* name = av_dict_get(in->metadata, "filename", nullptr, 0);
        drop("attachment #" + std::to_string(index) + " (" + (name ? name->value : "unnamed") +
             "): container " + muxer + " cannot hold attachments");
        return false;
      }
      return true;
    case AVMEDIA_TYPE_VIDEO:
      if (!(in->disposition & AV_DISPOSITION_ATTACHED_PIC)) {
        drop(what + ": only the main video stream is processed");
        return false;
      }
      if (!choice_.other) return false;
      if (in->disposition & AV_DISPOSITION_TIMED_THUMBNAILS) {
        drop(what + ": chapter thumbnails are not copied");
        return false;
      }
      if (muxer == "matroska") {
        add_cover_attachment(in);
        return false;  // no packets: the picture is the attachment's data
      }
      break;  // cover art
    case AVMEDIA_TYPE_DATA:
      if (!choice_.other) return false;
      // A QuickTime timecode track: the timecode is the video stream's "timecode" tag (copied
      // with the video's tags), from which the mov muxer writes its own track.
      if (par->codec_tag == MKTAG('t', 'm', 'c', 'd') &&
          av_dict_get(in->metadata, "timecode", nullptr, 0)) {
        log_->debug("{}: {}: its timecode is kept as a tag", output_name_, what);
        return false;
      }
      drop(what + ": data streams are not copied");
      return false;
    default:
      if (!choice_.other) return false;
      drop(what + ": not copied");
      return false;
  }
  // 1: yes, 0: no, < 0: the muxer cannot tell (let it try).
  if (avformat_query_codec(output_->oformat, par->codec_id, FF_COMPLIANCE_NORMAL) == 0) {
    drop(what + ": container " + muxer + " cannot hold it");
    return false;
  }
  return true;
}

void SourceCopy::add_cover_attachment(const AVStream* in) {
  const AVPacket& picture = in->attached_pic;
  if (!picture.data || picture.size <= 0) {
    drop("cover art stream #" + std::to_string(in->index) + ": no picture to copy");
    return;
  }
  const bool png = in->codecpar->codec_id == AV_CODEC_ID_PNG;
  AVStream* out = avformat_new_stream(output_, nullptr);
  if (!out) throw std::bad_alloc();
  out->codecpar->codec_type = AVMEDIA_TYPE_ATTACHMENT;
  out->codecpar->codec_id = in->codecpar->codec_id;
  out->codecpar->extradata =
      static_cast<uint8_t*>(av_mallocz(size_t(picture.size) + AV_INPUT_BUFFER_PADDING_SIZE));
  if (!out->codecpar->extradata) throw std::bad_alloc();
  std::memcpy(out->codecpar->extradata, picture.data, size_t(picture.size));
  out->codecpar->extradata_size = picture.size;
  av_dict_copy(&out->metadata, in->metadata, 0);
  if (!av_dict_get(out->metadata, "filename", nullptr, 0)) {
    av_dict_set(&out->metadata, "filename", png ? "cover.png" : "cover.jpg", 0);
  }
  if (!av_dict_get(out->metadata, "mimetype", nullptr, 0)) {
    av_dict_set(&out->metadata, "mimetype", png ? "image/png" : "image/jpeg", 0);
  }
}

void SourceCopy::copy_chapters() {
  if (source_->nb_chapters == 0) return;
  if (!muxer_is(output_, {"matroska", "webm", "ogg"}) && !is_mov_family(output_)) {
    drop(std::to_string(source_->nb_chapters) + " chapters: container " + output_->oformat->name +
         " cannot hold them");
    return;
  }
  output_->chapters = static_cast<AVChapter**>(av_calloc(source_->nb_chapters, sizeof(AVChapter*)));
  if (!output_->chapters) throw std::bad_alloc();
  for (unsigned i = 0; i < source_->nb_chapters; ++i) {
    const AVChapter* in = source_->chapters[i];
    auto* out = static_cast<AVChapter*>(av_mallocz(sizeof(AVChapter)));
    if (!out) throw std::bad_alloc();
    output_->chapters[output_->nb_chapters++] = out;
    out->id = in->id;
    out->time_base = in->time_base;
    out->start = in->start;
    out->end = in->end;
    av_dict_copy(&out->metadata, in->metadata, 0);
  }
}

void SourceCopy::copy_until(int64_t ts, AVRational tb, bool all,
                            const std::function<void(AVPacket*)>& write) {
  while (!done_) {
    if (!pending_) {
      const int rc = av_read_frame(source_.get(), packet_.get());
      if (rc < 0) {
        if (rc != AVERROR_EOF) {
          log_->warn("{}: stopped copying audio/subtitles: {}: {}", output_name_, source_path_,
                     av_error_string(rc));
        }
        done_ = true;
        return;
      }
      if (stream_map_[packet_->stream_index] < 0) {
        av_packet_unref(packet_.get());
        continue;
      }
      pending_ = true;
    }
    AVPacket* pkt = packet_.get();
    const AVStream* in = source_->streams[pkt->stream_index];
    const int64_t t = pkt->dts != AV_NOPTS_VALUE ? pkt->dts : pkt->pts;
    if (!all && t != AV_NOPTS_VALUE && ts != AV_NOPTS_VALUE &&
        av_compare_ts(t, in->time_base, ts, tb) > 0) {
      return;
    }
    const AVStream* out = output_->streams[stream_map_[pkt->stream_index]];
    pkt->stream_index = out->index;
    av_packet_rescale_ts(pkt, in->time_base, out->time_base);
    pkt->pos = -1;
    pending_ = false;
    write(pkt);
  }
}

}  // namespace wm::io
