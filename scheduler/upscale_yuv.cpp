#include "scheduler/upscale_yuv.h"

#include <tbb/parallel_pipeline.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "src/base/error.h"
#include "src/models/registry.h"
#include "src/models/resample/resample_yuv.h"

namespace wm::sched {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Item {
  io::VideoFrame timing;
  io::YuvImage in;
  io::YuvImage out;
  bool keep = true;
};
using ItemPtr = std::shared_ptr<Item>;

models::SamplePlane plane_of(const io::YuvImage& image, int p) {
  models::SamplePlane plane;
  plane.data = image.data[p];
  plane.stride = image.stride[p];
  plane.width = image.plane_width(p);
  plane.height = image.plane_height(p);
  plane.depth = image.depth;
  return plane;
}

}  // namespace

std::optional<models::ResampleKernel> yuv_native_kernel(const JobSpec& job,
                                                        const std::vector<Device>& devices,
                                                        const io::VideoInfo& source,
                                                        const io::VideoWriter& writer) {
  const std::string& kind = job.model.kind;
  const ModelKind* entry = find_model_kind(kind);
  if (!entry || !entry->yuv_resampler) return std::nullopt;
  // One CPU worker: a job that asks for ranks or several devices keeps its pipeline workers.
  if (devices.size() > 1 || job.parallel.ranks > 1) return std::nullopt;
  for (const Device& d : devices) {
    if (d.kind != Device::Kind::kCpu) return std::nullopt;
  }
  // NVDEC hands frames over semi-planar (NV12, P010): the RGB path converts those.
  if (job.tiling.enabled || source.alpha || job.decode == DecodeMode::kNvdec) return std::nullopt;
  const int format = io::pixel_format_id(source.pix_fmt);
  if (!io::yuv_native_format(format)) return std::nullopt;
  int shift_x = 0, shift_y = 0;
  io::chroma_shifts(format, shift_x, shift_y);
  if (source.width % (1 << shift_x) != 0 || source.height % (1 << shift_y) != 0) {
    return std::nullopt;
  }
  const int range = io::yuv_range(format, source.color_range);
  if (!writer.accepts_yuv(format, source.colorspace, range, source.height)) return std::nullopt;
  models::ResampleKernel kernel = models::resample_kernel(kind, job.model.scale);
  return kernel;
}

YuvRunResult run_yuv_upscale(io::VideoReader& reader, io::VideoWriter& writer,
                             const models::ResampleKernel& kernel, const YuvRunOptions& options) {
  YuvRunResult result;
  double source_s = 0, sink_s = 0;
  std::atomic<int64_t> model_ns{0};
  io::YuvImage first;  // the first frame's shape and tags, which every frame must keep
  int64_t slice = 0, since_slice = 0;
  const Clock::time_point start = Clock::now();

  auto read = [&](tbb::flow_control& fc) -> ItemPtr {
    if (options.cancel && options.cancel->load()) throw Cancelled("interrupted");
    const Clock::time_point t0 = Clock::now();
    auto item = std::make_shared<Item>();
    if (!reader.read_yuv(item->timing, item->in) ||
        (options.end_frame >= 0 && item->timing.index >= options.end_frame)) {
      fc.stop();
      return nullptr;
    }
    const io::YuvImage& in = item->in;
    if (first.empty()) first = in;
    if (in.format != first.format || in.width != first.width || in.height != first.height ||
        in.colorspace != first.colorspace || in.color_range != first.color_range) {
      throw InputError("frame " + std::to_string(item->timing.index) +
                       " changes the pixel format, size or colour tags of the video");
    }
    item->keep = item->timing.index >= options.write_from;
    ++result.frames_read;
    source_s += since(t0);
    return item;
  };

  auto resample = [&](ItemPtr item) -> ItemPtr {
    if (!item->keep) return item;
    const Clock::time_point t0 = Clock::now();
    item->out = writer.yuv_buffer();
    for (int p = 0; p < 3; ++p) {
      models::resample_plane(kernel, plane_of(item->in, p), plane_of(item->out, p));
    }
    item->in = io::YuvImage();  // the decoder's buffer goes back to its pool
    model_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    return item;
  };

  auto write = [&](ItemPtr item) {
    const Clock::time_point t0 = Clock::now();
    if (!item->keep) {
      ++result.frames_dropped;
      return;
    }
    writer.write_yuv(item->timing, item->out);
    item->out = io::YuvImage();
    ++result.frames_written;
    // Progress and on_slice move together, by slices, as the RGB pipeline's sink does.
    if (++since_slice >= std::max(1, options.slice_frames)) {
      if (options.progress) options.progress->add(since_slice);
      if (options.on_slice) options.on_slice(slice, result.frames_written);
      ++slice;
      since_slice = 0;
    }
    sink_s += since(t0);
  };

  tbb::parallel_pipeline(
      size_t(std::max(2, options.tokens)),
      tbb::make_filter<void, ItemPtr>(tbb::filter_mode::serial_in_order, read) &
          tbb::make_filter<ItemPtr, ItemPtr>(tbb::filter_mode::parallel, resample) &
          tbb::make_filter<ItemPtr, void>(tbb::filter_mode::serial_in_order, write));
  if (since_slice > 0) {
    if (options.progress) options.progress->add(since_slice);
    if (options.on_slice) options.on_slice(slice, result.frames_written);
  }

  result.stats.wall_seconds = since(start);
  result.stats.source_seconds = source_s;
  result.stats.model_seconds = model_ns * 1e-9;
  result.stats.sink_seconds = sink_s;
  result.stats.slices = slice + (since_slice > 0 ? 1 : 0);
  return result;
}

}  // namespace wm::sched
