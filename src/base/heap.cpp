#include "src/base/heap.h"

#include <malloc.h>

namespace wm {

void tune_heap_for_frames() {
  mallopt(M_MMAP_THRESHOLD,
          32 << 20);  // glibc's largest; fixed, not adjusted as blocks come and go
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
}

}  // namespace wm
