// cuDNN graph-API (backend) form of the Real-ESRGAN 3×3 convolution with its epilogue:
// cudnn_fused_conv.h says what it computes and why.
#include "src/models/kernels/cudnn_fused_conv.h"

#include <cudnn.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace wm::models::cuda {
namespace {

// One backend descriptor, destroyed with its owner.
struct Desc {
  cudnnBackendDescriptor_t d = nullptr;
  explicit Desc(cudnnBackendDescriptorType_t type) {
    if (cudnnBackendCreateDescriptor(type, &d) != CUDNN_STATUS_SUCCESS) d = nullptr;
  }
  ~Desc() {
    if (d) cudnnBackendDestroyDescriptor(d);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
};
using DescPtr = std::shared_ptr<Desc>;

// Collects the first failure of a chain of backend calls (the graph is built in one go, and any
// failure means "this graph does not build here": the caller falls back).
struct Builder {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::vector<DescPtr> keep;  // every descriptor of the graph lives as long as the plan

  DescPtr make(cudnnBackendDescriptorType_t type) {
    auto p = std::make_shared<Desc>(type);
    if (!p->d && status == CUDNN_STATUS_SUCCESS) status = CUDNN_STATUS_ALLOC_FAILED;
    keep.push_back(p);
    return p;
  }
  void set(const DescPtr& desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* values) {
    if (status != CUDNN_STATUS_SUCCESS || !desc->d) return;
    status = cudnnBackendSetAttribute(desc->d, name, type, count, values);
  }
  void set_desc(const DescPtr& desc, cudnnBackendAttributeName_t name, const DescPtr& value) {
    set(desc, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value->d);
  }
  void finalize(const DescPtr& desc) {
    if (status != CUDNN_STATUS_SUCCESS || !desc->d) return;
    status = cudnnBackendFinalize(desc->d);
  }
  bool ok() const { return status == CUDNN_STATUS_SUCCESS; }

  // A [N, C, H, W] tensor in pixel-major layout with `stride` elements per pixel (a broadcast
  // [1, C, 1, 1] vector: n = h = w = 1), or a by-value float scalar.
  DescPtr tensor(int64_t uid, cudnnDataType_t type, int64_t n, int64_t c, int64_t h, int64_t w,
                 int64_t stride, bool is_virtual = false, bool by_value = false) {
    DescPtr t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t dims[4] = {n, c, h, w};
    const int64_t strides[4] = {h * w * stride, 1, w * stride, stride};
    const int64_t alignment = by_value ? 4 : 16;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (is_virtual) {
      const bool yes = true;
      set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
    }
    if (by_value) {
      const bool yes = true;
      set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    }
    finalize(t);
    return t;
  }

  // out = mode(a[, b]) (float32 math); `slope`: the leaky ReLU's lower clip slope.
  DescPtr pointwise(cudnnPointwiseMode_t mode, const DescPtr& a, const DescPtr& b,
                    const DescPtr& out, double slope = 0) {
    DescPtr pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (mode == CUDNN_POINTWISE_RELU_FWD && slope != 0) {
      set(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, CUDNN_TYPE_DOUBLE, 1, &slope);
    }
    finalize(pw);
    DescPtr op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, a);
    if (b) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, out);
    finalize(op);
    return op;
  }
};

// Tensor ids of the variant pack.
enum Uid : int64_t {
  kX = 1,
  kW,
  kBias,
  kSlope,
  kR1,
  kR2,
  kAlpha1,
  kAlpha2,
  kOut0,
  kOut1,
  kVirtual = 100
};

struct Plan {
  std::vector<DescPtr> keep;
  DescPtr plan;
  int64_t workspace = 0;
  CudnnPlanInfo info;
  std::vector<int64_t> uids;  // what the variant pack carries, in this order
};

std::string plan_key(int device, EsrganDType dtype, const Conv3x3Args& a, bool unit) {
  std::string k;
  auto put = [&](int64_t v) { k += std::to_string(v) + ","; };
  put(device), put(int(dtype)), put(a.frames), put(a.height), put(a.width), put(a.in_channels);
  put(a.input_stride), put(a.out_channels), put(a.bias != nullptr), put(a.activation);
  put(a.activation == Conv3x3Args::kPRelu && unit);
  if (a.activation == Conv3x3Args::kLeaky) k += std::to_string(a.leaky_slope) + ",";
  put(a.residual1 ? a.residual1_stride : 0), put(a.residual2 ? a.residual2_stride : 0);
  put(a.outputs);
  for (int i = 0; i < a.outputs; ++i) put(a.out_stride[i]);
  return k;
}

// The operation graph of `a` and its heuristics' engine configurations; then each config's plan
// is built and timed on the caller's tensors, and the fastest kept. With `choice` ≥ 0 (the
// position in the heuristics' list of the config that won on another handle: the list depends
// on the graph, not on the handle) only that config is built, untimed. Null when none builds.
std::unique_ptr<Plan> build_plan(cudnnHandle_t handle, EsrganDType dtype, const Conv3x3Args& a,
                                 bool unit, cudaStream_t stream, const CudnnWorkspace& workspace,
                                 const std::function<const void*(int64_t uid)>& pointer_of,
                                 int choice = -1) {
  Builder g;
  const cudnnDataType_t io = dtype == EsrganDType::kFloat16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  const int64_t n = a.frames, h = a.height, w = a.width, cin = a.in_channels, cout = a.out_channels;
  int64_t next_virtual = kVirtual;
  auto virt = [&] { return g.tensor(next_virtual++, f32, n, cout, h, w, cout, true); };
  auto vec = [&](int64_t uid) { return g.tensor(uid, io, 1, cout, 1, 1, cout); };
  auto scalar = [&](int64_t uid) { return g.tensor(uid, f32, 1, 1, 1, 1, 1, false, true); };

  const DescPtr x = g.tensor(kX, io, n, cin, h, w, a.input_stride);
  // The weight [Cout][3][3][Cin]: dims (K, C, R, S) with a KRSC layout.
  DescPtr wt = g.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  {
    const int64_t dims[4] = {cout, cin, 3, 3};
    const int64_t strides[4] = {9 * cin, 1, 3 * cin, cin};
    const int64_t uid = kW, alignment = 16;
    g.set(wt, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &io);
    g.set(wt, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    g.set(wt, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    g.set(wt, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    g.set(wt, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    g.finalize(wt);
  }
  DescPtr conv = g.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  {
    const int64_t dims = 2, ones[2] = {1, 1};
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    g.set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    g.set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    g.set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    g.set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones);
    g.set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, ones);
    g.set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, ones);
    g.set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, ones);
    g.finalize(conv);
  }
  std::vector<DescPtr> ops;
  std::vector<int64_t> uids = {kX, kW};
  DescPtr y = virt();
  {
    DescPtr op = g.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    const float alpha = 1.f, beta = 0.f;
    g.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x);
    g.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, wt);
    g.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y);
    g.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv);
    g.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    g.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    g.finalize(op);
    ops.push_back(op);
  }
  // The epilogue as pointwise steps over values: value 0 is the convolution's output, step i
  // makes value i + 1 from value `a` and either a tensor operand `b` or value `b_value`. Every
  // value is a virtual float tensor except the last step's, the first destination.
  struct Step {
    cudnnPointwiseMode_t mode;
    int a;
    DescPtr b;
    int b_value = -1;
    double slope = 0;
  };
  std::vector<Step> steps;
  int cur = 0;
  auto step = [&](cudnnPointwiseMode_t mode, int in, DescPtr b, int b_value = -1,
                  double slope = 0) {
    steps.push_back({mode, in, std::move(b), b_value, slope});
    return cur = int(steps.size());
  };
  if (a.bias) {
    step(CUDNN_POINTWISE_ADD, cur, vec(kBias));
    uids.push_back(kBias);
  }
  if (a.activation == Conv3x3Args::kLeaky) {
    step(CUDNN_POINTWISE_RELU_FWD, cur, nullptr, -1, double(a.leaky_slope));
  } else if (a.activation == Conv3x3Args::kPRelu) {
    const DescPtr slope = vec(kSlope);
    uids.push_back(kSlope);
    const int z = cur;
    if (unit) {  // max(z, a·z) for slopes in [0, 1]
      const int az = step(CUDNN_POINTWISE_MUL, z, slope);
      step(CUDNN_POINTWISE_MAX, z, nullptr, az);
    } else {  // relu(z) + a·(z − relu(z))
      const int r = step(CUDNN_POINTWISE_RELU_FWD, z, nullptr);
      const int neg = step(CUDNN_POINTWISE_SUB, z, nullptr, r);
      const int scaled = step(CUDNN_POINTWISE_MUL, neg, slope);
      step(CUDNN_POINTWISE_ADD, r, nullptr, scaled);
    }
  }
  if (a.residual1) {
    const int m = step(CUDNN_POINTWISE_MUL, cur, scalar(kAlpha1));
    step(CUDNN_POINTWISE_ADD, m, g.tensor(kR1, io, n, cout, h, w, a.residual1_stride));
    uids.push_back(kAlpha1), uids.push_back(kR1);
  }
  if (a.residual2) {
    const int m = step(CUDNN_POINTWISE_MUL, cur, scalar(kAlpha2));
    step(CUDNN_POINTWISE_ADD, m, g.tensor(kR2, io, n, cout, h, w, a.residual2_stride));
    uids.push_back(kAlpha2), uids.push_back(kR2);
  }
  if (steps.empty()) step(CUDNN_POINTWISE_IDENTITY, 0, nullptr);
  const DescPtr out0 = g.tensor(kOut0, io, n, cout, h, w, a.out_stride[0]);
  uids.push_back(kOut0);
  std::vector<DescPtr> values = {y};
  for (size_t i = 0; i < steps.size(); ++i) {
    values.push_back(i + 1 == steps.size() ? out0 : virt());
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    const DescPtr b = s.b_value >= 0 ? values[size_t(s.b_value)] : s.b;
    ops.push_back(g.pointwise(s.mode, values[size_t(s.a)], b, values[i + 1], s.slope));
  }
  if (a.outputs == 2) {
    const DescPtr out1 = g.tensor(kOut1, io, n, cout, h, w, a.out_stride[1]);
    ops.push_back(g.pointwise(CUDNN_POINTWISE_IDENTITY, out0, nullptr, out1));
    uids.push_back(kOut1);
  }
  DescPtr graph = g.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  {
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const DescPtr& op : ops) raw.push_back(op->d);
    g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(raw.size()),
          raw.data());
    g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    g.finalize(graph);
  }
  if (!g.ok()) return nullptr;

  // Engine configurations from the heuristics (mode A, then the fallback list).
  std::vector<DescPtr> configs;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Builder h;
    DescPtr heur = h.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    h.set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    h.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    h.finalize(heur);
    if (!h.ok()) continue;
    int64_t count = 0;
    if (cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr) != CUDNN_STATUS_SUCCESS ||
        count <= 0) {
      continue;
    }
    count = std::min<int64_t>(count, 8);
    std::vector<DescPtr> got;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      got.push_back(std::make_shared<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      raw.push_back(got.back()->d);
    }
    int64_t returned = 0;
    if (cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
                                 raw.data()) != CUDNN_STATUS_SUCCESS) {
      continue;
    }
    for (int64_t i = 0; i < returned; ++i) configs.push_back(got[size_t(i)]);
    g.keep.push_back(heur);
    if (!configs.empty()) break;
  }

  std::unique_ptr<Plan> best;
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  int tried = 0;
  for (size_t c = 0; c < configs.size(); ++c) {
    if (choice >= 0 && int(c) != choice) continue;
    const DescPtr& cfg = configs[c];
    Builder p;
    DescPtr plan = p.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    p.set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    p.set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
    p.finalize(plan);
    if (!p.ok()) continue;
    int64_t ws = 0, got = 0;
    cudnnBackendGetAttribute(plan->d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                             &got, &ws);
    if (ws > (int64_t(1) << 30)) continue;
    void* scratch = workspace(size_t(ws));
    if (ws > 0 && !scratch) continue;
    Builder v;
    DescPtr pack = v.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    std::vector<void*> ptrs;
    for (int64_t uid : uids) ptrs.push_back(const_cast<void*>(pointer_of(uid)));
    v.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()),
          uids.data());
    v.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()),
          ptrs.data());
    v.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &scratch);
    v.finalize(pack);
    if (!v.ok()) continue;
    float ms = 0;
    if (choice >= 0) {
      // Chosen on another handle: no timing (which would wait for this stream, and for whatever
      // other threads queued on the device before it).
      ++tried;
      best = std::make_unique<Plan>();
      best->plan = plan;
      best->workspace = ws;
      best->uids = uids;
      best->info.workspace_bytes = ws;
      best->info.choice = int(c);
      break;
    }
    // One warm-up, then the mean of three.
    if (cudnnBackendExecute(handle, plan->d, pack->d) != CUDNN_STATUS_SUCCESS) {
      cudaGetLastError();
      continue;
    }
    ++tried;
    cudaEventRecord(start, stream);
    for (int r = 0; r < 3; ++r) cudnnBackendExecute(handle, plan->d, pack->d);
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&ms, start, stop);
    ms /= 3;
    if (!best || ms < best->info.best_ms) {
      best = std::make_unique<Plan>();
      best->plan = plan;
      best->workspace = ws;
      best->uids = uids;
      best->info.best_ms = ms;
      best->info.workspace_bytes = ws;
      best->info.choice = int(c);
      int64_t engine_count = 0;
      DescPtr engine = std::make_shared<Desc>(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      if (cudnnBackendGetAttribute(cfg->d, CUDNN_ATTR_ENGINECFG_ENGINE,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine_count,
                                   &engine->d) == CUDNN_STATUS_SUCCESS) {
        int64_t index = -1, one = 0;
        cudnnBackendGetAttribute(engine->d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                 &one, &index);
        best->info.engine = index;
      }
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!best) return nullptr;
  best->info.configs_tried = tried;
  best->keep = g.keep;
  best->keep.insert(best->keep.end(), configs.begin(), configs.end());
  return best;
}

struct Cache {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<Plan>> plans;  // null: does not build (don't try again)
  // Per device and shape (no handle): the winning config's position in the heuristics' list.
  // Plans are per handle (one per thread), the timing only once per device: several lanes on
  // one GPU (each its own thread) timed every shape again on each new thread while the others
  // computed, and their launches took ~50× longer than one lane's.
  std::map<std::string, int> choices;
};
Cache& cache() {
  static auto* c = new Cache();  // never freed: plans may outlive static destruction order
  return *c;
}

}  // namespace

cudaError_t launch_conv3x3_cudnn(cudnnHandle_t handle, EsrganDType dtype, const Conv3x3Args& a,
                                 bool prelu_in_unit, cudaStream_t stream,
                                 const CudnnWorkspace& workspace) {
  if (!handle || a.outputs < 1 || a.outputs > 2 || !a.input || !a.weight || a.frames < 1 ||
      a.height < 1 || a.width < 1 || a.in_channels < 1 || a.out_channels < 1 ||
      a.input_stride < a.in_channels || (a.activation == Conv3x3Args::kPRelu && !a.prelu) ||
      (a.residual2 && !a.residual1)) {
    return cudaErrorInvalidValue;
  }
  for (int i = 0; i < a.outputs; ++i) {
    if (!a.out[i] || a.out[i] == a.input || a.out[i] == a.residual1 || a.out[i] == a.residual2) {
      return cudaErrorInvalidValue;
    }
  }
  int device = 0;
  cudaGetDevice(&device);
  // Handles are per thread (LibTorch's pool), plans are per handle.
  const std::string shape = plan_key(device, dtype, a, prelu_in_unit);
  const std::string key = shape + "h" + std::to_string(reinterpret_cast<uintptr_t>(handle));
  if (cudnnSetStream(handle, stream) != CUDNN_STATUS_SUCCESS) return cudaErrorUnknown;
  const float alpha1 = a.alpha1, alpha2 = a.alpha2;
  const std::function<const void*(int64_t)> pointer_of = [&](int64_t uid) -> const void* {
    switch (uid) {
      case kX:
        return a.input;
      case kW:
        return a.weight;
      case kBias:
        return a.bias;
      case kSlope:
        return a.prelu;
      case kR1:
        return a.residual1;
      case kR2:
        return a.residual2;
      case kAlpha1:
        return &alpha1;  // by-value scalars: host pointers
      case kAlpha2:
        return &alpha2;
      case kOut0:
        return a.out[0];
      case kOut1:
        return a.out[1];
      default:
        return nullptr;
    }
  };
  std::shared_ptr<Plan> plan;
  int choice = -1;
  {
    std::lock_guard<std::mutex> lock(cache().mutex);
    auto it = cache().plans.find(key);
    if (it != cache().plans.end()) {
      if (!it->second) return cudaErrorNotSupported;
      plan = it->second;
    }
    const auto c = cache().choices.find(shape);
    if (c != cache().choices.end()) choice = c->second;
  }
  if (!plan) {
    if (choice >= 0) {
      plan = build_plan(handle, dtype, a, prelu_in_unit, stream, workspace, pointer_of, choice);
    }
    if (!plan) plan = build_plan(handle, dtype, a, prelu_in_unit, stream, workspace, pointer_of);
    std::lock_guard<std::mutex> lock(cache().mutex);
    cache().plans[key] = plan;
    if (!plan) return cudaErrorNotSupported;
    cache().choices.emplace(shape, plan->info.choice);
  }
  void* scratch = workspace(size_t(plan->workspace));
  if (plan->workspace > 0 && !scratch) return cudaErrorMemoryAllocation;
  Builder v;
  DescPtr pack = v.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  std::vector<void*> raw;
  for (int64_t uid : plan->uids) raw.push_back(const_cast<void*>(pointer_of(uid)));
  v.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(plan->uids.size()),
        plan->uids.data());
  v.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(raw.size()),
        raw.data());
  v.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &scratch);
  v.finalize(pack);
  if (!v.ok()) return cudaErrorUnknown;
  if (cudnnBackendExecute(handle, plan->plan->d, pack->d) != CUDNN_STATUS_SUCCESS) {
    return cudaErrorLaunchFailure;
  }
  return cudaGetLastError();
}

CudnnPlanInfo cudnn_conv3x3_plan_info(EsrganDType dtype, const Conv3x3Args& a, bool prelu_in_unit) {
  int device = 0;
  cudaGetDevice(&device);
  const std::string prefix = plan_key(device, dtype, a, prelu_in_unit) + "h";
  std::lock_guard<std::mutex> lock(cache().mutex);
  CudnnPlanInfo found;  // the timed plan's (plans of later handles reuse its choice untimed)
  for (const auto& [key, plan] : cache().plans) {
    if (key.compare(0, prefix.size(), prefix) == 0 && plan &&
        (found.choice < 0 || plan->info.best_ms > 0)) {
      found = plan->info;
    }
  }
  return found;
}

}  // namespace wm::models::cuda
