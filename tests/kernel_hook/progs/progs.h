// Test programs for the hook, linked against the fake libraries. Each scenario
// is a few lines that drive one behaviour; the Python tests read the records.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "../fake/fake_api.h"

// snippets.cc: one forwarding check per hooked API; returns the failures.
int run_snippets(void);

// scenarios.cc
int scenario_nocuda(int argc, char** argv);
int scenario_timed(int argc, char** argv);
int scenario_ranks(int argc, char** argv);
int scenario_threads(int argc, char** argv);
int scenario_fork(int argc, char** argv);
int scenario_capture(int argc, char** argv);
int scenario_hang(int argc, char** argv);
int scenario_missing(int argc, char** argv);
int scenario_bench(int argc, char** argv);
int scenario_sampled(int argc, char** argv);
int scenario_errno(int argc, char** argv);
int scenario_capture_inflight(int argc, char** argv);
int scenario_device1(int argc, char** argv);
int scenario_fork_during_start(int argc, char** argv);
int scenario_two_devices(int argc, char** argv);
int scenario_no_set_device(int argc, char** argv);
int scenario_capture_race(int argc, char** argv);
int scenario_destroy_race(int argc, char** argv);
int scenario_bypass(int argc, char** argv);
// driver.cc
int scenario_driver(int argc, char** argv);
// script.cc
int scenario_script(int argc, char** argv);
int scenario_spawn(int argc, char** argv);
int scenario_train(int argc, char** argv);

// An "empty kernel" for the fake device, exported so its name resolves.
extern "C" void xt_test_empty_kernel(void** args);
