#pragma once
// Precision: the numerics a layer's matrix products run in.
//
//   fp32        every GEMM reads its operands as they are (f32 or f64).
//   bf16_mixed  every GEMM of a layer (Linear, Conv2d and their tensor- and
//               domain-parallel forms, the tied output head) reads bf16 copies of its
//               operands — the activation and the weight, rounded to nearest even —
//               and accumulates in fp32 into an f32 result. Parameters stay f32: they
//               are the master weights the optimizer updates and checkpoints store, and
//               their gradients are f32. Everything that decides accuracy stays f32 with
//               double accumulation: norms, softmax and attention scores, activations'
//               element-wise math, losses, gradient norms, reductions.
//
// A model takes a precision with Module::set_compute_precision (nn/module.hpp); tessera-run
// with the key `precision: fp32 | bf16-mixed` (docs/driver.md).

#include <string>
#include <string_view>

namespace tessera {

enum class Precision { fp32, bf16_mixed };

// "fp32", "bf16-mixed" (the config spelling).
std::string_view precision_name(Precision precision) noexcept;
// Parses a config spelling; ConfigError naming `what`, the text and the spellings otherwise.
Precision parse_precision(std::string_view name, std::string_view what = "precision");

}  // namespace tessera
