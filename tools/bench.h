// wmbench subcommands. Each takes the arguments after `wmbench` (argv[0] is the subcommand name),
// prints one JSON object to stdout and returns the process exit status.
#pragma once

int bench_upscale(int argc, char** argv);
int bench_upscale_devices(int argc, char** argv);  // tools/bench_upscale_devices.cpp
int bench_vae_decode(int argc, char** argv);
int bench_vae_job(int argc, char** argv);
int bench_seedvr2(int argc, char** argv);          // tools/bench_seedvr2.cpp
int bench_seedvr2_upscale(int argc, char** argv);  // tools/bench_seedvr2_upscale.cpp
int bench_e2e(int argc, char** argv);              // tools/bench_e2e.cpp
int bench_segments(int argc, char** argv);         // tools/bench_segments.cpp
