// The process's heap settings for frame-sized buffers. Call once at the start of main().
#pragma once

namespace wm {

// A job allocates and frees buffers of a picture's size (12 MB for a 4K 8-bit frame, hundreds of
// MB for a float slice) many times a second. With glibc's defaults the allocator hands such
// blocks back to the kernel (mmap/munmap, heap trimming) and every reuse faults and zeroes the
// pages again: on the 2-core VM a lanczos ×2 job to 4K spent 2.2–2.7 s in the kernel against
// ffmpeg's 0.6–1.1 s. Keeping up to 256 MB of freed heap and serving blocks up to 32 MB from the
// heap brings it to 1.1 s (docs/architecture.md, "Heap").
void tune_heap_for_frames();

}  // namespace wm
