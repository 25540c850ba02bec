# WMBATCH_SANITIZE=ON: the unit tests that need no LibTorch, linked against the real libraries
# of the torch-free side (wm_test_support: wm_watch, wm_scheduler, wm_io, wm_parallel, wm_core)
# without the LibTorch side (wm_torch) — target `sanitize_tests`, CTest label `sanitize`;
# scripts/sanitize.sh, CI. Instrumenting the model code too would compile every LibTorch
# translation unit under AddressSanitizer + UBSan — several times a normal build's compile time,
# past what CI can spend (docs/testing.md has the numbers) — and LibTorch itself is not
# instrumented anyway. Covered: the job parser and validator (with the model registry and the
# built-in resamplers), geometry, safetensors and torch.save readers, everything libav (reader,
# writer, stream copy, segments), the SQLite journal, WATCH.yaml and the status page's request
# parsing, the table of released model names and one-line commands as jobs, the fuzz seeds
# and regressions, and the ranks' host mailbox (threads).
set(WM_SANITIZE_TESTS test_front_door_spec test_fuzz_inputs test_geometry test_io test_io_carry
  test_job_spec test_journal test_mailbox test_safetensors test_torch_pickle)

add_custom_target(sanitize_tests)
foreach(name ${WM_SANITIZE_TESTS})
  add_executable(san_${name} ${CMAKE_CURRENT_SOURCE_DIR}/unit/${name}.cpp)
  target_link_libraries(san_${name} PRIVATE wm_test_support GTest::gtest_main)
  wm_warnings(san_${name})
  add_dependencies(sanitize_tests san_${name})
  gtest_discover_tests(san_${name} TEST_PREFIX "sanitize." PROPERTIES LABELS sanitize
    DISCOVERY_TIMEOUT 120)
endforeach()
