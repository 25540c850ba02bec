#include "tests/support/media.h"

#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "io/av_handles.h"
#include "io/av_log.h"

extern "C" {
#include <libavutil/channel_layout.h>
#include <libavutil/display.h>
#include <libavutil/dovi_meta.h>
#include <libavutil/mastering_display_metadata.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
}

namespace wm::test {
namespace {

constexpr double kPi = 3.14159265358979323846;

void check(int rc, const std::string& what) {
  if (rc < 0) throw std::runtime_error(what + ": " + io::av_error_string(rc));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char kAssHeader[] =
    "[Script Info]\r\nScriptType: v4.00+\r\nPlayResX: 384\r\nPlayResY: 288\r\n\r\n"
    "[V4+ Styles]\r\nFormat: Name, Fontname, Fontsize, PrimaryColour, SecondaryColour, "
    "OutlineColour, BackColour, Bold, Italic, Underline, StrikeOut, ScaleX, ScaleY, Spacing, "
    "Angle, BorderStyle, Outline, Shadow, Alignment, MarginL, MarginR, MarginV, Encoding\r\n"
    "Style: Default,Arial,16,&Hffffff,&Hffffff,&H0,&H0,0,0,0,0,100,100,0,0,1,1,0,2,10,10,10,0\r\n"
    "\r\n[Events]\r\nFormat: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, "
    "Text\r\n";

// Muxes packets of one encoder into its stream.
void write_packets(AVFormatContext* output, AVCodecContext* encoder, AVStream* stream,
                   AVFrame* frame) {
  check(avcodec_send_frame(encoder, frame), "avcodec_send_frame");
  io::PacketPtr packet = io::make_packet();
  for (;;) {
    const int rc = avcodec_receive_packet(encoder, packet.get());
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
    check(rc, "avcodec_receive_packet");
    packet->stream_index = stream->index;
    av_packet_rescale_ts(packet.get(), encoder->time_base, stream->time_base);
    check(av_interleaved_write_frame(output, packet.get()), "av_interleaved_write_frame");
  }
}

void fill_video_frame(AVFrame* frame, const ClipSpec& spec, int t) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(AVPixelFormat(frame->format));
  const bool rgb = desc->flags & AV_PIX_FMT_FLAG_RGB;
  const int depth = desc->comp[0].depth;
  const bool full = rgb || spec.color_range == AVCOL_RANGE_JPEG;
  const bool alpha = (desc->flags & AV_PIX_FMT_FLAG_ALPHA) && desc->nb_components >= 2;
  // Colour components only (grey with alpha, ya8, has one): the alpha is written below.
  const int components = std::min<int>(desc->nb_components - (alpha ? 1 : 0), 3);
  // av_write_image_line2() ORs samples of formats up to 8 bits into place: start from zero.
  for (AVBufferRef* buf : frame->buf) {
    if (buf) std::memset(buf->data, 0, buf->size);
  }
  std::vector<uint16_t> line(frame->width);
  for (int c = 0; c < components; ++c) {
    const bool chroma = !rgb && c > 0;
    const int w = chroma ? AV_CEIL_RSHIFT(frame->width, desc->log2_chroma_w) : frame->width;
    const int h = chroma ? AV_CEIL_RSHIFT(frame->height, desc->log2_chroma_h) : frame->height;
    const double max = double((1 << depth) - 1);
    const double lo = full ? 0.0 : double(16 << (depth - 8));
    const double span = full ? max : double((chroma ? 224 : 219) << (depth - 8));
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        if (spec.flat) {
          line[x] = uint16_t(spec.flat_value[c]);
          continue;
        }
        // Sample the pattern at the luma position of this (possibly subsampled) sample.
        const int lx = chroma ? x << desc->log2_chroma_w : x;
        const int ly = chroma ? y << desc->log2_chroma_h : y;
        // Interlaced: bottom-field rows show the pattern one field (two bar pixels) later.
        const int time = spec.interlaced ? 2 * t + (ly % 2) : t;
        const double v =
            (spec.grey && c > 0)
                ? (rgb ? pattern_value(0, lx, ly, time, frame->width, frame->height) : 0.5)
                : pattern_value(c, lx, ly, time, frame->width, frame->height);
        line[x] = uint16_t(std::lround(lo + v * span));
      }
      av_write_image_line2(line.data(), frame->data, frame->linesize, desc, 0, y, c, w, 2);
    }
  }
  if (alpha) {
    const int c = desc->nb_components - 1;
    const double max = double((1 << desc->comp[c].depth) - 1);
    for (int y = 0; y < frame->height; ++y) {
      for (int x = 0; x < frame->width; ++x) {
        line[x] = uint16_t(std::lround(alpha_value(x, y, frame->width, frame->height) * max));
      }
      av_write_image_line2(line.data(), frame->data, frame->linesize, desc, 0, y, c, frame->width,
                           2);
    }
  }
}

// A tiny PNG (16x16 RGB) to serve as cover art.
std::vector<uint8_t> encode_png_cover() {
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_PNG);
  if (!codec) throw std::runtime_error("make_clip: no png encoder");
  io::CodecContextPtr enc(avcodec_alloc_context3(codec));
  enc->width = 16;
  enc->height = 16;
  enc->pix_fmt = AV_PIX_FMT_RGB24;
  enc->time_base = AVRational{1, 1};
  check(avcodec_open2(enc.get(), codec, nullptr), "make_clip: open png");
  io::FramePtr frame = io::make_frame();
  frame->format = AV_PIX_FMT_RGB24;
  frame->width = 16;
  frame->height = 16;
  check(av_frame_get_buffer(frame.get(), 0), "av_frame_get_buffer");
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 48; ++x) frame->data[0][y * frame->linesize[0] + x] = uint8_t(x * 5 + y);
  }
  frame->pts = 0;
  check(avcodec_send_frame(enc.get(), frame.get()), "png send");
  check(avcodec_send_frame(enc.get(), nullptr), "png flush");
  io::PacketPtr packet = io::make_packet();
  check(avcodec_receive_packet(enc.get(), packet.get()), "png receive");
  return std::vector<uint8_t>(packet->data, packet->data + packet->size);
}

void write_sample(AVFrame* frame, int i, double value) {
  switch (frame->format) {
    case AV_SAMPLE_FMT_FLT:
    case AV_SAMPLE_FMT_FLTP:
      reinterpret_cast<float*>(frame->data[0])[i] = float(value);
      break;
    case AV_SAMPLE_FMT_DBL:
    case AV_SAMPLE_FMT_DBLP:
      reinterpret_cast<double*>(frame->data[0])[i] = value;
      break;
    case AV_SAMPLE_FMT_S16:
    case AV_SAMPLE_FMT_S16P:
      reinterpret_cast<int16_t*>(frame->data[0])[i] = int16_t(std::lround(value * 32767));
      break;
    case AV_SAMPLE_FMT_S32:
    case AV_SAMPLE_FMT_S32P:
      reinterpret_cast<int32_t*>(frame->data[0])[i] = int32_t(std::lround(value * 2147483647.0));
      break;
    default:
      throw std::runtime_error("make_clip: unsupported audio sample format");
  }
}

}  // namespace

double alpha_value(int x, int y, int width, int height) {
  (void)y;
  (void)height;
  return width > 1 ? double(x) / (width - 1) : 1.0;
}

double pattern_value(int c, int x, int y, int t, int width, int height) {
  // A diagonal gradient with fine steps (x and a fraction of y), moving bars with hard edges.
  const double ramp = (x + 0.37 * y) / (width + 0.37 * height);
  const bool bar = ((x + 2 * t) / 8 + y / 12) % 2 == 1;
  switch (c) {
    case 0:
      return 0.05 + 0.7 * ramp + (bar ? 0.2 : 0.0);
    case 1:
      return 0.5 + 0.3 * std::sin(2 * kPi * (double(x) / width + t / 10.0)) * (bar ? -1 : 1);
    default:
      return 0.5 + 0.3 * std::cos(2 * kPi * (double(y) / height + t / 15.0));
  }
}

void make_clip(const std::string& path, const ClipSpec& spec) {
  io::install_av_log();
  AVFormatContext* raw_output = nullptr;
  check(avformat_alloc_output_context2(&raw_output, nullptr, nullptr, path.c_str()),
        "make_clip: " + path);
  io::FormatOutputPtr output(raw_output);
  const bool global_header = output->oformat->flags & AVFMT_GLOBALHEADER;
  const bool mkv = ends_with(path, ".mkv");

  // Video timing: CFR pts 0,1,2... in 1/fps; VFR durations 1,2,1,3 frame intervals in ms.
  const AVRational fps{spec.fps.num, spec.fps.den};
  const AVRational video_tb = spec.vfr ? AVRational{1, 1000} : av_inv_q(fps);
  const int64_t step_ms = std::llround(1000.0 * fps.den / fps.num);
  std::vector<int64_t> pts(spec.frames);
  std::vector<int64_t> durations(spec.frames);
  for (int i = 0, cycle[4] = {1, 2, 1, 3}; i < spec.frames; ++i) {
    durations[i] = spec.vfr ? cycle[i % 4] * step_ms : 1;
    pts[i] = i == 0 ? 0 : pts[i - 1] + durations[i - 1];
  }
  const double end_seconds = spec.frames ? (pts.back() + durations.back()) * av_q2d(video_tb) : 0.0;

  // Video encoder and stream.
  io::CodecContextPtr video;
  AVStream* video_stream = nullptr;
  if (spec.video) {
    const AVCodec* video_codec = avcodec_find_encoder_by_name(spec.codec.c_str());
    if (!video_codec) throw std::runtime_error("make_clip: no encoder " + spec.codec);
    video.reset(avcodec_alloc_context3(video_codec));
    video->width = spec.width;
    video->height = spec.height;
    video->pix_fmt = av_get_pix_fmt(spec.pix_fmt.c_str());
    video->time_base = video_tb;
    video->framerate = fps;
    video->color_primaries = AVColorPrimaries(spec.color_primaries);
    video->color_trc = AVColorTransferCharacteristic(spec.color_trc);
    video->colorspace = AVColorSpace(spec.colorspace);
    video->color_range = AVColorRange(spec.color_range);
    video->thread_count = 1;
    if (spec.gop > 0) video->gop_size = spec.gop;
    if (global_header) video->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if (spec.interlaced) {
      video->field_order = AV_FIELD_TT;
      video->flags |= AV_CODEC_FLAG_INTERLACED_DCT | AV_CODEC_FLAG_INTERLACED_ME;
    }
    AVDictionary* options = nullptr;
    if (spec.codec == "libx264") {
      av_dict_set(&options, "preset", "veryfast", 0);
      // Lossless for flat colours so the decoded values are exactly the ones asked for.
      av_dict_set(&options, spec.flat ? "qp" : "crf", spec.flat ? "0" : "18", 0);
      if (spec.gop > 0) av_dict_set(&options, "x264-params", "scenecut=0", 0);
    }
    if (spec.codec == "libx265") av_dict_set(&options, "preset", "ultrafast", 0);
    for (const auto& [key, value] : spec.codec_options) {
      av_dict_set(&options, key.c_str(), value.c_str(), 0);
    }
    const int rc = avcodec_open2(video.get(), video_codec, &options);
    av_dict_free(&options);
    check(rc, "make_clip: open " + spec.codec + " " + spec.pix_fmt);
    video_stream = avformat_new_stream(output.get(), nullptr);
    check(avcodec_parameters_from_context(video_stream->codecpar, video.get()), "parameters");
    video_stream->time_base = video_tb;
    video_stream->avg_frame_rate = fps;
    if (!spec.timecode.empty()) {
      av_dict_set(&video_stream->metadata, "timecode", spec.timecode.c_str(), 0);
    }
    if (spec.rotation_90) {
      auto* matrix = reinterpret_cast<int32_t*>(
          av_stream_new_side_data(video_stream, AV_PKT_DATA_DISPLAYMATRIX, 9 * sizeof(int32_t)));
      av_display_rotation_set(matrix, 90);
    }
    if (spec.hdr_side_data) {
      auto* mastering = reinterpret_cast<AVMasteringDisplayMetadata*>(
          av_stream_new_side_data(video_stream, AV_PKT_DATA_MASTERING_DISPLAY_METADATA,
                                  sizeof(AVMasteringDisplayMetadata)));
      std::memset(mastering, 0, sizeof(*mastering));
      const int primaries[3][2] = {{35400, 14600}, {8500, 39850}, {6550, 2300}};  // BT.2020 R,G,B
      for (int i = 0; i < 3; ++i) {
        mastering->display_primaries[i][0] = AVRational{primaries[i][0], 50000};
        mastering->display_primaries[i][1] = AVRational{primaries[i][1], 50000};
      }
      mastering->white_point[0] = AVRational{15635, 50000};
      mastering->white_point[1] = AVRational{16450, 50000};
      mastering->min_luminance = AVRational{50, 10000};
      mastering->max_luminance = AVRational{1000, 1};
      mastering->has_primaries = 1;
      mastering->has_luminance = 1;
      auto* light = reinterpret_cast<AVContentLightMetadata*>(av_stream_new_side_data(
          video_stream, AV_PKT_DATA_CONTENT_LIGHT_LEVEL, sizeof(AVContentLightMetadata)));
      light->MaxCLL = 1000;
      light->MaxFALL = 400;
    }
    if (spec.dolby_vision) {
      size_t size = 0;
      AVDOVIDecoderConfigurationRecord* dovi = av_dovi_alloc(&size);
      if (!dovi) throw std::bad_alloc();
      dovi->dv_version_major = 1;
      dovi->dv_profile = 8;
      dovi->dv_level = 4;
      dovi->rpu_present_flag = 1;
      dovi->bl_present_flag = 1;
      dovi->dv_bl_signal_compatibility_id = 1;
      check(av_stream_add_side_data(video_stream, AV_PKT_DATA_DOVI_CONF,
                                    reinterpret_cast<uint8_t*>(dovi), size),
            "dovi side data");
    }
  }

  // Audio encoder and stream.
  io::CodecContextPtr audio;
  AVStream* audio_stream = nullptr;
  if (spec.audio) {
    const std::string name = spec.audio_codec.empty() ? "aac" : spec.audio_codec;
    const AVCodec* codec = avcodec_find_encoder_by_name(name.c_str());
    if (!codec) throw std::runtime_error("make_clip: no encoder " + name);
    audio.reset(avcodec_alloc_context3(codec));
    audio->sample_fmt = codec->sample_fmts ? codec->sample_fmts[0] : AV_SAMPLE_FMT_S16;
    audio->sample_rate = spec.audio_rate;
    av_channel_layout_default(&audio->ch_layout, 1);
    audio->time_base = AVRational{1, spec.audio_rate};
    audio->bit_rate = 64000;
    if (global_header) audio->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    check(avcodec_open2(audio.get(), codec, nullptr), "make_clip: open " + name);
    audio_stream = avformat_new_stream(output.get(), nullptr);
    check(avcodec_parameters_from_context(audio_stream->codecpar, audio.get()), "parameters");
    audio_stream->time_base = audio->time_base;
    av_dict_set(&audio_stream->metadata, "language", spec.language.c_str(), 0);
  }

  // Subtitle encoder and stream.
  io::CodecContextPtr subtitle;
  AVStream* subtitle_stream = nullptr;
  if (spec.subtitles) {
    const std::string name =
        !spec.subtitle_codec.empty() ? spec.subtitle_codec : (mkv ? "subrip" : "mov_text");
    const AVCodec* codec = avcodec_find_encoder_by_name(name.c_str());
    if (!codec) throw std::runtime_error("make_clip: no encoder " + name);
    subtitle.reset(avcodec_alloc_context3(codec));
    subtitle->time_base = AVRational{1, 1000};
    subtitle->subtitle_header = reinterpret_cast<uint8_t*>(av_strdup(kAssHeader));
    subtitle->subtitle_header_size = int(std::strlen(kAssHeader));
    if (global_header) subtitle->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    check(avcodec_open2(subtitle.get(), codec, nullptr), "make_clip: open " + name);
    subtitle_stream = avformat_new_stream(output.get(), nullptr);
    check(avcodec_parameters_from_context(subtitle_stream->codecpar, subtitle.get()), "parameters");
    subtitle_stream->time_base = AVRational{1, 1000};
    av_dict_set(&subtitle_stream->metadata, "language", spec.language.c_str(), 0);
  }

  // Attachments, cover art, data, chapters.
  if (spec.font_attachment) {
    AVStream* font = avformat_new_stream(output.get(), nullptr);
    font->codecpar->codec_type = AVMEDIA_TYPE_ATTACHMENT;
    font->codecpar->codec_id = AV_CODEC_ID_TTF;
    const char kFont[] = "\0\1\0\0 not a real font, but bytes to carry";
    font->codecpar->extradata =
        static_cast<uint8_t*>(av_mallocz(sizeof(kFont) + AV_INPUT_BUFFER_PADDING_SIZE));
    std::memcpy(font->codecpar->extradata, kFont, sizeof(kFont));
    font->codecpar->extradata_size = int(sizeof(kFont));
    av_dict_set(&font->metadata, "filename", "font.ttf", 0);
    av_dict_set(&font->metadata, "mimetype", "application/x-truetype-font", 0);
  }
  AVStream* cover_stream = nullptr;
  std::vector<uint8_t> cover;
  if (spec.cover_art) {
    cover = encode_png_cover();
    cover_stream = avformat_new_stream(output.get(), nullptr);
    cover_stream->codecpar->codec_type = AVMEDIA_TYPE_VIDEO;
    cover_stream->codecpar->codec_id = AV_CODEC_ID_PNG;
    cover_stream->codecpar->width = 16;
    cover_stream->codecpar->height = 16;
    cover_stream->disposition = AV_DISPOSITION_ATTACHED_PIC;
    cover_stream->time_base = AVRational{1, 90000};
    av_dict_set(&cover_stream->metadata, "filename", "cover.png", 0);
    av_dict_set(&cover_stream->metadata, "mimetype", "image/png", 0);
  }
  AVStream* data_stream = nullptr;
  if (spec.data_stream) {
    data_stream = avformat_new_stream(output.get(), nullptr);
    data_stream->codecpar->codec_type = AVMEDIA_TYPE_DATA;
    data_stream->codecpar->codec_id = AV_CODEC_ID_SMPTE_KLV;
    data_stream->time_base = AVRational{1, 90000};
  }
  if (spec.chapters > 0) {
    output->chapters = static_cast<AVChapter**>(av_calloc(spec.chapters, sizeof(AVChapter*)));
    const int64_t end_ms = std::llround(end_seconds * 1000);
    for (int i = 0; i < spec.chapters; ++i) {
      auto* chapter = static_cast<AVChapter*>(av_mallocz(sizeof(AVChapter)));
      output->chapters[output->nb_chapters++] = chapter;
      chapter->id = i + 1;
      chapter->time_base = AVRational{1, 1000};
      chapter->start = i * end_ms / spec.chapters;
      chapter->end = (i + 1) * end_ms / spec.chapters;
      av_dict_set(&chapter->metadata, "title", ("Chapter " + std::to_string(i + 1)).c_str(), 0);
    }
  }

  // Images (image2: "a.png", "frames/%06d.png") are opened by the muxer itself, frame by frame.
  if (!(output->oformat->flags & AVFMT_NOFILE)) {
    check(avio_open(&output->pb, path.c_str(), AVIO_FLAG_WRITE), "make_clip: create " + path);
  } else if (!av_filename_number_test(path.c_str())) {
    av_opt_set(output->priv_data, "update", "1", 0);  // one image, not a numbered sequence
  }
  check(avformat_write_header(output.get(), nullptr), "make_clip: header " + path);
  if (cover_stream) {
    io::PacketPtr packet = io::make_packet();
    check(av_new_packet(packet.get(), int(cover.size())), "av_new_packet");
    std::memcpy(packet->data, cover.data(), cover.size());
    packet->stream_index = cover_stream->index;
    packet->flags |= AV_PKT_FLAG_KEY;
    check(av_interleaved_write_frame(output.get(), packet.get()), "write cover");
  }
  if (data_stream) {
    for (int i = 0; i < spec.frames; ++i) {
      // A KLV packet: 16-byte universal key, BER length, value.
      uint8_t klv[16 + 1 + 4] = {0x06, 0x0e, 0x2b, 0x34,       0x02, 0x0b, 0x01,
                                 0x01, 0x0e, 0x01, 0x03,       0x01, 0x01, 0x00,
                                 0x00, 0x00, 4,    uint8_t(i), 1,    2,    3};
      io::PacketPtr packet = io::make_packet();
      check(av_new_packet(packet.get(), int(sizeof(klv))), "av_new_packet");
      std::memcpy(packet->data, klv, sizeof(klv));
      packet->stream_index = data_stream->index;
      packet->pts = packet->dts = av_rescale_q(pts[i], video_tb, data_stream->time_base);
      check(av_interleaved_write_frame(output.get(), packet.get()), "write data");
    }
  }

  if (video) {
    io::FramePtr frame = io::make_frame();
    frame->format = video->pix_fmt;
    frame->width = spec.width;
    frame->height = spec.height;
    check(av_frame_get_buffer(frame.get(), 0), "av_frame_get_buffer");
    for (int i = 0; i < spec.frames; ++i) {
      check(av_frame_make_writable(frame.get()), "av_frame_make_writable");
      fill_video_frame(frame.get(), spec, i);
      frame->pts = pts[i];
      frame->pkt_duration = durations[i];
      frame->color_range = video->color_range;
      frame->colorspace = video->colorspace;
      frame->color_primaries = video->color_primaries;
      frame->color_trc = video->color_trc;
      frame->interlaced_frame = spec.interlaced;
      frame->top_field_first = spec.interlaced;
      write_packets(output.get(), video.get(), video_stream, frame.get());
    }
    write_packets(output.get(), video.get(), video_stream, nullptr);
  }

  if (audio) {
    const int64_t total = std::llround(end_seconds * spec.audio_rate);
    const bool variable = audio->codec->capabilities & AV_CODEC_CAP_VARIABLE_FRAME_SIZE;
    const bool small_last = audio->codec->capabilities & AV_CODEC_CAP_SMALL_LAST_FRAME;
    const int frame_size = audio->frame_size > 0 ? audio->frame_size : 1024;
    for (int64_t done = 0; done < total;) {
      const int n = int(std::min<int64_t>(frame_size, total - done));
      io::FramePtr samples = io::make_frame();
      samples->format = audio->sample_fmt;
      samples->sample_rate = audio->sample_rate;
      check(av_channel_layout_copy(&samples->ch_layout, &audio->ch_layout), "layout");
      samples->nb_samples = (n < frame_size && !variable && !small_last) ? frame_size : n;
      check(av_frame_get_buffer(samples.get(), 0), "av_frame_get_buffer");
      for (int s = 0; s < samples->nb_samples; ++s) {
        const double value =
            s < n ? 0.5 * std::sin(2 * kPi * 440.0 * double(done + s) / spec.audio_rate) : 0.0;
        write_sample(samples.get(), s, value);
      }
      samples->pts = done;
      write_packets(output.get(), audio.get(), audio_stream, samples.get());
      done += n;
    }
    write_packets(output.get(), audio.get(), audio_stream, nullptr);
  }

  if (subtitle) {
    const int64_t end_ms = std::llround(end_seconds * 1000);
    const char* texts[2] = {"Hello", "World"};
    for (int e = 0; e < 2; ++e) {
      const int64_t start_ms = e * end_ms / 2;
      const int64_t stop_ms = (e + 1) * end_ms / 2;
      std::string ass = std::string("0,0,Default,,0,0,0,,") + texts[e];
      AVSubtitleRect rect{};
      rect.type = SUBTITLE_ASS;
      rect.ass = ass.data();
      AVSubtitleRect* rects[1] = {&rect};
      AVSubtitle sub{};
      sub.format = 1;
      sub.start_display_time = 0;
      sub.end_display_time = uint32_t(stop_ms - start_ms);
      sub.num_rects = 1;
      sub.rects = rects;
      sub.pts = av_rescale_q(start_ms, AVRational{1, 1000}, AV_TIME_BASE_Q);
      uint8_t buffer[4096];
      const int size = avcodec_encode_subtitle(subtitle.get(), buffer, sizeof(buffer), &sub);
      check(size, "avcodec_encode_subtitle");
      io::PacketPtr packet = io::make_packet();
      check(av_new_packet(packet.get(), size), "av_new_packet");
      std::memcpy(packet->data, buffer, size_t(size));
      packet->stream_index = subtitle_stream->index;
      packet->pts = packet->dts =
          av_rescale_q(start_ms, AVRational{1, 1000}, subtitle_stream->time_base);
      packet->duration =
          av_rescale_q(stop_ms - start_ms, AVRational{1, 1000}, subtitle_stream->time_base);
      check(av_interleaved_write_frame(output.get(), packet.get()), "write subtitle");
    }
  }

  check(av_write_trailer(output.get()), "make_clip: trailer " + path);
  check(avio_closep(&output->pb), "make_clip: close " + path);
}

Probe probe(const std::string& path) {
  AVFormatContext* raw = nullptr;
  check(avformat_open_input(&raw, path.c_str(), nullptr, nullptr), "probe: open " + path);
  io::FormatInputPtr input(raw);
  check(avformat_find_stream_info(input.get(), nullptr), "probe: stream info " + path);
  Probe result;
  int video_index = av_find_best_stream(input.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (video_index >= 0 &&
      (input->streams[video_index]->disposition & AV_DISPOSITION_ATTACHED_PIC)) {
    video_index = -1;
    for (unsigned i = 0; i < input->nb_streams && video_index < 0; ++i) {
      const AVStream* s = input->streams[i];
      if (s->codecpar->codec_type == AVMEDIA_TYPE_VIDEO &&
          !(s->disposition & AV_DISPOSITION_ATTACHED_PIC)) {
        video_index = int(i);
      }
    }
  }
  int audio_index = -1;
  for (unsigned i = 0; i < input->nb_streams; ++i) {
    const AVStream* s = input->streams[i];
    if (s->codecpar->codec_type == AVMEDIA_TYPE_AUDIO) {
      ++result.audio_streams;
      if (audio_index < 0) {
        audio_index = int(i);
        result.audio_codec = avcodec_get_name(s->codecpar->codec_id);
        if (auto* e = av_dict_get(s->metadata, "language", nullptr, 0)) {
          result.audio_language = e->value;
        }
      }
    } else if (s->codecpar->codec_type == AVMEDIA_TYPE_SUBTITLE) {
      ++result.subtitle_streams;
      result.subtitle_codecs.push_back(avcodec_get_name(s->codecpar->codec_id));
    } else if (s->codecpar->codec_type == AVMEDIA_TYPE_ATTACHMENT) {
      const AVDictionaryEntry* name = av_dict_get(s->metadata, "filename", nullptr, 0);
      result.attachments.push_back(name ? name->value : "");
    } else if (s->codecpar->codec_type == AVMEDIA_TYPE_DATA) {
      ++result.data_streams;
    }
    if (s->disposition & AV_DISPOSITION_ATTACHED_PIC) ++result.attached_pictures;
  }
  result.chapters = int(input->nb_chapters);
  for (unsigned i = 0; i < input->nb_chapters; ++i) {
    const AVDictionaryEntry* title = av_dict_get(input->chapters[i]->metadata, "title", nullptr, 0);
    result.chapter_titles.push_back(title ? title->value : "");
  }
  result.has_audio = audio_index >= 0;

  io::CodecContextPtr decoder;
  AVStream* video = nullptr;
  if (video_index >= 0) {
    video = input->streams[video_index];
    const AVCodecParameters* par = video->codecpar;
    result.width = par->width;
    result.height = par->height;
    if (const char* name = av_get_pix_fmt_name(AVPixelFormat(par->format))) result.pix_fmt = name;
    result.codec = avcodec_get_name(par->codec_id);
    result.video_time_base = io::Rational{video->time_base.num, video->time_base.den};
    result.color_primaries = par->color_primaries;
    result.color_trc = par->color_trc;
    result.colorspace = par->color_space;
    result.color_range = par->color_range;
    if (const uint8_t* m = av_stream_get_side_data(video, AV_PKT_DATA_DISPLAYMATRIX, nullptr)) {
      result.rotation = av_display_rotation_get(reinterpret_cast<const int32_t*>(m)) + 0.0;
    }
    result.has_mastering_display =
        av_stream_get_side_data(video, AV_PKT_DATA_MASTERING_DISPLAY_METADATA, nullptr) != nullptr;
    result.has_content_light =
        av_stream_get_side_data(video, AV_PKT_DATA_CONTENT_LIGHT_LEVEL, nullptr) != nullptr;
    result.has_dolby_vision = av_stream_get_side_data(video, AV_PKT_DATA_DOVI_CONF, nullptr);
    result.field_order = par->field_order;
    for (const char* key : {"timecode", "TIMECODE"}) {
      if (const AVDictionaryEntry* e = av_dict_get(video->metadata, key, nullptr, 0)) {
        result.timecode = e->value;
      }
    }
    const AVCodec* codec = avcodec_find_decoder(par->codec_id);
    if (!codec) throw std::runtime_error("probe: no decoder for " + result.codec);
    decoder.reset(avcodec_alloc_context3(codec));
    check(avcodec_parameters_to_context(decoder.get(), par), "probe: parameters");
    decoder->pkt_timebase = video->time_base;
    check(avcodec_open2(decoder.get(), codec, nullptr), "probe: open decoder");
  }

  io::PacketPtr packet = io::make_packet();
  io::FramePtr frame = io::make_frame();
  int64_t audio_ticks = 0;
  int64_t last_duration = 0;
  auto receive = [&] {
    while (avcodec_receive_frame(decoder.get(), frame.get()) == 0) {
      if (result.video_pts.empty()) {
        result.frame_mastering_display =
            av_frame_get_side_data(frame.get(), AV_FRAME_DATA_MASTERING_DISPLAY_METADATA);
        result.frame_content_light =
            av_frame_get_side_data(frame.get(), AV_FRAME_DATA_CONTENT_LIGHT_LEVEL);
        result.frame_interlaced = frame->interlaced_frame;
        result.frame_top_field_first = frame->top_field_first;
      }
      result.video_pts.push_back(frame->best_effort_timestamp);
      last_duration = frame->pkt_duration;
      av_frame_unref(frame.get());
    }
  };
  while (av_read_frame(input.get(), packet.get()) >= 0) {
    if (video && packet->stream_index == video_index) {
      check(avcodec_send_packet(decoder.get(), packet.get()), "probe: decode " + path);
      receive();
    } else if (packet->stream_index == audio_index) {
      audio_ticks += packet->duration;
    } else if (input->streams[packet->stream_index]->codecpar->codec_type ==
               AVMEDIA_TYPE_SUBTITLE) {
      ++result.subtitle_packets;
    }
    av_packet_unref(packet.get());
  }
  if (decoder) {
    check(avcodec_send_packet(decoder.get(), nullptr), "probe: flush");
    receive();
  }
  result.video_frames = int64_t(result.video_pts.size());
  if (video) {
    if (video->duration != AV_NOPTS_VALUE && video->duration > 0) {
      result.video_duration = video->duration * av_q2d(video->time_base);
    } else if (!result.video_pts.empty()) {
      result.video_duration = (result.video_pts.back() + last_duration - result.video_pts.front()) *
                              av_q2d(video->time_base);
    }
  }
  if (audio_index >= 0) {
    result.audio_duration = audio_ticks * av_q2d(input->streams[audio_index]->time_base);
  }
  return result;
}

std::string make_temp_dir(const std::string& tag) {
  std::string pattern = "/tmp/wm-" + tag + "-XXXXXX";
  if (!mkdtemp(pattern.data())) {
    throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
  }
  return pattern;
}

TempDir::TempDir(const std::string& tag) : path_(make_temp_dir(tag)) {}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ignored;
  // Tests may leave the folder read-only; make it removable again.
  std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::add, ignored);
  std::filesystem::remove_all(path_, ignored);
}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    TempDir discard(std::move(*this));
    path_ = std::move(other.path_);
    other.path_.clear();
  }
  return *this;
}

std::vector<io::VideoFrame> read_all(const std::string& path, const io::ReaderOptions& options) {
  io::VideoReader reader(path, options);
  std::vector<io::VideoFrame> frames;
  for (;;) {
    io::VideoFrame frame;
    if (!reader.read(frame)) break;
    frames.push_back(std::move(frame));
  }
  return frames;
}

void make_image(const std::string& path, const std::string& codec, const std::string& pix_fmt,
                int width, int height, int frames) {
  ClipSpec spec;
  spec.width = width;
  spec.height = height;
  spec.frames = frames;
  spec.codec = codec;
  spec.pix_fmt = pix_fmt;
  spec.audio = false;
  make_clip(path, spec);
}

std::vector<std::string> make_batch_clips(const TempDir& dir, int count, const std::string& pix_fmt,
                                          const std::function<std::array<int, 3>(int)>& shape) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) {
    const std::array<int, 3> whf = shape(i);
    ClipSpec spec;
    spec.width = whf[0];
    spec.height = whf[1];
    spec.frames = whf[2];
    spec.codec = "ffv1";
    spec.pix_fmt = pix_fmt;
    spec.container_ext = ".mkv";
    spec.audio = false;
    names.push_back("clip" + std::to_string(i) + ".mkv");
    make_clip(dir.file(names.back()), spec);
  }
  return names;
}

}  // namespace wm::test
