#include "tessera/pp/schedule.hpp"

#include <algorithm>

#include "tessera/error.hpp"
#include "tessera/detail/enum_table.hpp"

namespace tessera::pp {

constexpr tessera::detail::EnumName<Schedule> kScheduleNames[] = {
    {Schedule::gpipe, "gpipe"},
    {Schedule::one_f_one_b, "1f1b"},
};

std::string_view schedule_name(Schedule schedule) noexcept {
  return tessera::detail::name_of(kScheduleNames, schedule);
}

Schedule parse_schedule(std::string_view text, std::string_view key) {
  return tessera::detail::parse_enum(kScheduleNames, text, key, "pipeline schedule");
}

std::vector<Action> stage_actions(Schedule schedule, int stage, int stages, int microbatches) {
  if (stages < 1) throw InvalidArgument("stage_actions: stages must be >= 1, got " + std::to_string(stages));
  if (stage < 0 || stage >= stages) {
    throw InvalidArgument("stage_actions: stage " + std::to_string(stage) + " is outside [0, " +
                          std::to_string(stages) + ")");
  }
  if (microbatches < 1) {
    throw InvalidArgument("stage_actions: microbatches must be >= 1, got " + std::to_string(microbatches));
  }
  using K = Action::Kind;
  std::vector<Action> out;
  out.reserve(static_cast<std::size_t>(2 * microbatches));
  if (schedule == Schedule::gpipe) {
    for (int j = 0; j < microbatches; ++j) out.push_back({K::forward, j});
    // Backward from the last microbatch: the one whose forward ran last, so its
    // activations are still cached and the last stage starts at once.
    for (int j = microbatches - 1; j >= 0; --j) out.push_back({K::backward, j});
    return out;
  }
  // Warm-up forwards fill the pipeline below this stage, plus one (schedule.hpp: the
  // slack that keeps the stage messages' round trip off the critical path); the last
  // stage has none.
  const int warmup = stage == stages - 1 ? 0 : std::min(stages - stage, microbatches);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) out.push_back({K::forward, next_forward});
  while (next_forward < microbatches) {
    out.push_back({K::forward, next_forward++});
    out.push_back({K::backward, next_backward++});
  }
  while (next_backward < microbatches) out.push_back({K::backward, next_backward++});
  return out;
}

std::string actions_str(const std::vector<Action>& actions) {
  std::string s;
  for (const Action& a : actions) {
    if (!s.empty()) s += ' ';
    s += (a.kind == Action::Kind::forward ? "F" : "B") + std::to_string(a.microbatch);
  }
  return s;
}

int peak_in_flight(const std::vector<Action>& actions) {
  int in_flight = 0, peak = 0;
  for (const Action& a : actions) {
    in_flight += a.kind == Action::Kind::forward ? 1 : -1;
    peak = std::max(peak, in_flight);
  }
  return peak;
}

double schedule_bubble_fraction(int stages, int microbatches) {
  if (stages < 1 || microbatches < 1) {
    throw InvalidArgument("schedule_bubble_fraction: stages (" + std::to_string(stages) + ") and microbatches (" +
                          std::to_string(microbatches) + ") must be >= 1");
  }
  return static_cast<double>(stages - 1) / static_cast<double>(microbatches + stages - 1);
}

}  // namespace tessera::pp
