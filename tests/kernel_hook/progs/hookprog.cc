// hookprog MODE [ARGS]: one small scenario per mode (see scenarios.cc).
#include <cstring>

#include "progs.h"

int main(int argc, char** argv) {
  static const struct {
    const char* mode;
    int (*fn)(int, char**);
  } modes[] = {
      {"snippets", [](int, char**) { return run_snippets() ? 1 : 0; }},
      {"nocuda", scenario_nocuda},     {"timed", scenario_timed},
      {"ranks", scenario_ranks},       {"threads", scenario_threads},
      {"fork", scenario_fork},         {"capture", scenario_capture},
      {"hang", scenario_hang},         {"missing", scenario_missing},
      {"bench", scenario_bench},       {"sampled", scenario_sampled},     {"errno", scenario_errno},
      {"capture_inflight", scenario_capture_inflight}, {"device1", scenario_device1},
      {"fork_during_start", scenario_fork_during_start},
      {"two_devices", scenario_two_devices}, {"no_set_device", scenario_no_set_device},
      {"capture_race", scenario_capture_race}, {"destroy_race", scenario_destroy_race},
      {"bypass", scenario_bypass},     {"script", scenario_script},       {"spawn", scenario_spawn},
      {"train", scenario_train},       {"driver", scenario_driver},     {"probe", scenario_probe},
  };
  for (const auto& m : modes)
    if (argc > 1 && strcmp(argv[1], m.mode) == 0) return m.fn(argc - 2, argv + 2);
  fprintf(stderr, "usage: hookprog MODE [ARGS]; unknown mode %s\n", argc > 1 ? argv[1] : "(none)");
  return 2;
}
