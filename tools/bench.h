// The benchmarks wmbench dispatches to; each parses its own arguments (after the bench name)
// and prints one JSON object on stdout. Returns the process exit code.
#pragma once

int bench_upscale(int argc, char** argv);
int bench_vae_decode(int argc, char** argv);
