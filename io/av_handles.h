// RAII for libav handles: one stateless deleter per handle type and a unique_ptr alias, so every
// handle is released on every path (including exceptions) without goto-style cleanup.
// Also av_check()/av_error_string(): turn a negative AVERROR into a one-line wm::AvError.
// Internal to io/ (and tests): includes libav headers, so src/ must not include this file.
#pragma once

#include <memory>
#include <string>

#include "src/base/error.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/frame.h>
#include <libswscale/swscale.h>
}

namespace wm::io {

struct FrameDeleter {
  void operator()(AVFrame* frame) const { av_frame_free(&frame); }
};
struct PacketDeleter {
  void operator()(AVPacket* packet) const { av_packet_free(&packet); }
};
struct CodecContextDeleter {
  void operator()(AVCodecContext* context) const { avcodec_free_context(&context); }
};
// For contexts opened with avformat_open_input(): closes the file too.
struct FormatInputDeleter {
  void operator()(AVFormatContext* context) const { avformat_close_input(&context); }
};
// For contexts from avformat_alloc_output_context2(): closes `pb` unless the format has no file
// (AVFMT_NOFILE), then frees the context. Does not write a trailer.
struct FormatOutputDeleter {
  void operator()(AVFormatContext* context) const {
    if (!context) return;
    if (context->oformat && !(context->oformat->flags & AVFMT_NOFILE)) avio_closep(&context->pb);
    avformat_free_context(context);
  }
};
struct SwsContextDeleter {
  void operator()(SwsContext* context) const { sws_freeContext(context); }
};
struct AvDictionaryDeleter {
  void operator()(AVDictionary* dict) const { av_dict_free(&dict); }
};
// For reference-counted buffers (hardware device contexts): drops this reference.
struct BufferRefDeleter {
  void operator()(AVBufferRef* buffer) const { av_buffer_unref(&buffer); }
};

using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;
using PacketPtr = std::unique_ptr<AVPacket, PacketDeleter>;
using CodecContextPtr = std::unique_ptr<AVCodecContext, CodecContextDeleter>;
using FormatInputPtr = std::unique_ptr<AVFormatContext, FormatInputDeleter>;
using FormatOutputPtr = std::unique_ptr<AVFormatContext, FormatOutputDeleter>;
using SwsContextPtr = std::unique_ptr<SwsContext, SwsContextDeleter>;
using BufferRefPtr = std::unique_ptr<AVBufferRef, BufferRefDeleter>;

// Allocating constructors; throw std::bad_alloc when libav returns null.
FramePtr make_frame();
PacketPtr make_packet();

// The text of an AVERROR code ("Invalid data found when processing input").
std::string av_error_string(int rc);

// Throws AvError("PATH: CALL: TEXT", rc, call, exit_code) when rc < 0; returns rc otherwise.
int av_check(int rc, const char* call, const std::string& path, int exit_code = kExitDataErr);

}  // namespace wm::io
