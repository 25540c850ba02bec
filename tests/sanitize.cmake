# WMBATCH_SANITIZE=ON: the unit tests that need no LibTorch, linked against a LibTorch-free
# subset of the libraries (target `sanitize_tests`, CTest label `sanitize`; scripts/sanitize.sh,
# CI). Instrumenting the model code too would compile every LibTorch translation unit under
# AddressSanitizer + UBSan — several times a normal build's compile time, past what CI can spend
# (docs/testing.md has the numbers) — and LibTorch itself is not instrumented anyway. Covered:
# the job parser and validator (with the model registry; model constructors stubbed as in the
# fuzzer), geometry, safetensors and torch.save readers, everything libav (reader, writer,
# stream copy, segments), the SQLite journal, WATCH.yaml and the status page's request parsing,
# the table of released model names and one-line commands as jobs, and the fuzz seeds and
# regressions.
set(WM_SANITIZE_TESTS test_front_door_spec test_fuzz_inputs test_geometry test_io test_io_carry
  test_job_spec test_journal test_safetensors test_torch_pickle)

add_library(wm_sanitize_core STATIC
  ${PROJECT_SOURCE_DIR}/src/job_spec.cpp ${PROJECT_SOURCE_DIR}/src/yaml_load.cpp
  ${PROJECT_SOURCE_DIR}/src/geometry.cpp ${PROJECT_SOURCE_DIR}/src/models/registry.cpp
  ${PROJECT_SOURCE_DIR}/src/models/catalog.cpp ${PROJECT_SOURCE_DIR}/src/media_names.cpp
  ${PROJECT_SOURCE_DIR}/src/job_command.cpp ${PROJECT_SOURCE_DIR}/src/models/seedvr2/seedvr2_options.cpp
  ${PROJECT_SOURCE_DIR}/tests/fuzz/model_stubs.cpp
  ${PROJECT_SOURCE_DIR}/scheduler/journal.cpp ${PROJECT_SOURCE_DIR}/scheduler/sqlite.cpp
  ${PROJECT_SOURCE_DIR}/scheduler/fingerprint.cpp ${PROJECT_SOURCE_DIR}/watch/watch_spec.cpp
  ${PROJECT_SOURCE_DIR}/watch/http_request.cpp)
target_include_directories(wm_sanitize_core PUBLIC ${PROJECT_SOURCE_DIR})
target_compile_definitions(wm_sanitize_core PRIVATE
  WM_CONFIGS_SOURCE_DIR="${PROJECT_SOURCE_DIR}/configs")
# registry.cpp reads LibTorch's version header (kind aoti); no LibTorch library is linked.
target_include_directories(wm_sanitize_core SYSTEM PRIVATE ${TORCH_INCLUDE_DIRS})
target_link_libraries(wm_sanitize_core PUBLIC wm_base wm_weights wm_io yaml-cpp
  nlohmann_json::nlohmann_json SQLite::SQLite3)
wm_warnings(wm_sanitize_core)

add_library(wm_sanitize_support STATIC ${CMAKE_CURRENT_SOURCE_DIR}/support/media.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/support/log_capture.cpp ${CMAKE_CURRENT_SOURCE_DIR}/support/run.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/support/planar_turn.cpp)
target_link_libraries(wm_sanitize_support PUBLIC wm_io wm_sanitize_core GTest::gtest)
target_compile_definitions(wm_sanitize_support PUBLIC
  WM_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
  WM_BINARY_DIR="${PROJECT_BINARY_DIR}")

add_custom_target(sanitize_tests)
foreach(name ${WM_SANITIZE_TESTS})
  add_executable(san_${name} ${CMAKE_CURRENT_SOURCE_DIR}/unit/${name}.cpp)
  target_link_libraries(san_${name} PRIVATE wm_sanitize_support GTest::gtest_main)
  wm_warnings(san_${name})
  add_dependencies(sanitize_tests san_${name})
  gtest_discover_tests(san_${name} TEST_PREFIX "sanitize." PROPERTIES LABELS sanitize
    DISCOVERY_TIMEOUT 120)
endforeach()
