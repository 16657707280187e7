#pragma once
// Pipeline schedules: the order in which one stage runs the forward (F) and backward (B)
// passes of the microbatches of a step. A schedule is data, computed per stage with no
// communication, so it can be printed, tested and simulated (the bubble benchmark).
//
//   GPipe  F0 F1 ... F(m-1), then B(m-1) ... B0: every forward before any backward, so a
//          stage holds all m microbatches in flight.
//   1F1B   stage s of p runs w warm-up forwards, then alternates one forward and one
//          backward (F(w) B0 F(w+1) B1 ...), then the remaining backward passes: at most
//          w + 1 microbatches in flight (PipeDream-flush, Megatron's non-interleaved 1F1B,
//          with one warm-up forward more). w = min(p - s, m) on every stage but the last,
//          0 on the last. PipeDream-flush's p - 1 - s leaves no slack in the steady state:
//          a stage's next backward needs the gradient of the microbatch whose activation
//          it sent one forward ago, so every microbatch waits for the activation to reach
//          the next stage and its gradient to come back, and those two messages add to
//          every step (on the 2-core machine, hidden 2048, p = 2, m = 16: idle 0.069 at the
//          median against 0.059 in theory). One forward more gives them that forward's
//          time (0.060), for one more microbatch of activations held.
//
// Both have the same idle fraction per stage, (p - 1) / (m + p - 1), when a backward
// costs a fixed multiple of a forward and messages are free (schedule_bubble_fraction).
// Every backward pass of microbatch j on stage s follows the backward of j on stage s + 1
// and every forward of j on s follows the forward of j on s - 1; both schedules keep
// each stage's order of sends and receives consistent with its neighbours', so the
// non-blocking sends of the executor cannot deadlock.

#include <string>
#include <string_view>
#include <vector>

namespace tessera::pp {

enum class Schedule { gpipe, one_f_one_b };
std::string_view schedule_name(Schedule schedule) noexcept;  // "gpipe" | "1f1b"
// "gpipe" | "1f1b"; ConfigError naming `key`, the value and both names otherwise.
Schedule parse_schedule(std::string_view text, std::string_view key = "schedule");

struct Action {
  enum class Kind { forward, backward };
  Kind kind = Kind::forward;
  int microbatch = 0;
  bool operator==(const Action&) const = default;
};

// The actions of `stage` (0-based) of `stages` for `microbatches` microbatches: each
// microbatch's forward once and backward once. InvalidArgument for stages < 1, a stage
// outside [0, stages) or microbatches < 1.
std::vector<Action> stage_actions(Schedule schedule, int stage, int stages, int microbatches);
std::string actions_str(const std::vector<Action>& actions);  // "F0 F1 B0 B1"

// The most microbatches in flight at once in `actions` (forward run, backward not yet):
// how many microbatches' activations a stage holds at its peak when it stashes them
// (GPipe: m; 1F1B: min(p - s + 1, m) on stage s < p - 1, 1 on the last). The memory
// plan of tessera-run --dry-run.
int peak_in_flight(const std::vector<Action>& actions);

// The theoretical idle fraction of a stage, (p - 1) / (m + p - 1).
double schedule_bubble_fraction(int stages, int microbatches);

}  // namespace tessera::pp
