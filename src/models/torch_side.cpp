// Finding the LibTorch side (torch_side.h): linked in, or wmbatch-torch.so beside the executable.
#include "src/models/torch_side.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <mutex>
#include <string>

#include "src/base/clock.h"
#include "src/base/error.h"
#include "src/base/log.h"

// Defined by the LibTorch side (src/models/torch/torch_entry.cpp). Weak: null in wmbatch, which
// does not link that side and loads it instead; programs that link it (tests, wmbench) get it at
// once (wm_core_torch makes its users' links keep it: -Wl,--undefined=wm_torch_models).
extern "C" const wm::models::TorchModels* wm_torch_models() __attribute__((weak));

namespace wm::models {
namespace {

std::mutex g_mutex;
void* g_module = nullptr;  // the dlopen handle, never closed (its code stays in use)
std::atomic<bool> g_loaded{false};

// wmbatch-torch.so in the folder of this process's executable (the link /proc/self/exe, so a
// symlink to wmbatch or a relative start finds the real one).
std::string module_path() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string exe = n > 0 ? std::string(buf, size_t(n)) : std::string();
  const size_t slash = exe.rfind('/');
  return (slash == std::string::npos ? std::string(".") : exe.substr(0, slash)) +
         "/wmbatch-torch.so";
}

const TorchModels* find_table() {
  using Entry = const TorchModels* (*)();
  Entry entry = wm_torch_models;
  if (!entry) entry = reinterpret_cast<Entry>(torch_side_symbol("wm_torch_models"));
  const TorchModels* table = entry();
  if (!table || table->abi != kTorchModelsAbi || table->size != sizeof(TorchModels)) {
    throw Error("the LibTorch side (" + module_path() +
                    ") is from another build of wmbatch; rebuild or reinstall both together",
                kExitSoftware);
  }
  return table;
}

}  // namespace

TorchBuildInfo torch_build_info() {
  TorchBuildInfo info;
#ifdef WM_TORCH_VERSION
  info.torch_version = WM_TORCH_VERSION;
#endif
#ifdef WMBATCH_WITH_CUDA
  info.cuda = true;
#endif
#ifdef WM_CUDA_VERSION
  info.cuda_version = WM_CUDA_VERSION;
#endif
  info.module = module_path();
  info.module_present = wm_torch_models != nullptr || ::access(info.module.c_str(), R_OK) == 0;
  if (wm_torch_models) info.module = "linked in";
  return info;
}

void* torch_side_symbol(const char* name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string path = module_path();
  if (!g_module) {
    const Clock::time_point start = Clock::now();
    // RTLD_NOW: a symbol the module cannot resolve (an executable without an object it needs)
    // fails here, with its name, not in the middle of a job.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      throw Error(
          one_line("cannot load LibTorch, which this job needs (a neural model or a GPU): " +
                   std::string(why ? why : path)) +
              " (wmbatch-torch.so must be beside the wmbatch executable)",
          kExitSoftware);
    }
    g_module = handle;
    g_loaded = true;
    log::get("wmbatch")->debug("loaded the LibTorch side ({}) in {:.3f} s", path,
                               seconds_since(start));
  }
  void* symbol = dlsym(g_module, name);
  if (!symbol) {
    throw Error(path + " has no entry " + name + ": it is from another build of wmbatch",
                kExitSoftware);
  }
  return symbol;
}

const TorchModels& torch_models() {
  // A failed load throws out of the initialisation, so the next call tries again.
  static const TorchModels* table = find_table();
  return *table;
}

bool torch_side_loaded() { return wm_torch_models != nullptr || g_loaded; }

}  // namespace wm::models
