// global_sum: exact accumulation in fixed point, one rounding (global_sum.hpp).
#include "tessera/domain/global_sum.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>
#include <string>

#include "tessera/agree.hpp"
#include "tessera/backend.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/check.hpp"

namespace tessera::domain {

namespace {

// A signed fixed-point number: sum of digit[i] * 2^(32 i - kOffset). Any double's value
// is an integer multiple of 2^-1074 below 2^1024; its 53-bit integer mantissa lands at
// bit position E - 53 + kOffset >= 26 (E: frexp's exponent, >= -1073), so every
// double fits, with 64 bits of headroom above 2^1024 for the sum's growth.
class ExactAccumulator {
 public:
  static constexpr int kOffset = 1152;  // 36 digits below 2^0
  static constexpr int kDigits = 72;    // up to 2^(32 * 72 - 1152) = 2^1152

  void add(double x) {
    if (x == 0.0) return;
    if (!std::isfinite(x)) {
      if (std::isnan(x)) {
        ++specials_[0];
      } else {
        ++specials_[x > 0 ? 1 : 2];
      }
      return;
    }
    int exponent = 0;
    const double fraction = std::frexp(x, &exponent);  // x = fraction * 2^exponent, |fraction| in [0.5, 1)
    // An integer with at most 53 significant bits: x = mantissa * 2^(exponent - 53).
    const auto mantissa = static_cast<std::int64_t>(std::ldexp(fraction, 53));
    const int position = exponent - 53 + kOffset;
    const int digit = position / 32, shift = position % 32;
    const unsigned __int128 magnitude = static_cast<unsigned __int128>(mantissa < 0 ? -mantissa : mantissa) << shift;
    const std::int64_t sign = mantissa < 0 ? -1 : 1;
    digits_[digit] += sign * static_cast<std::int64_t>(magnitude & 0xffffffffu);
    digits_[digit + 1] += sign * static_cast<std::int64_t>((magnitude >> 32) & 0xffffffffu);
    digits_[digit + 2] += sign * static_cast<std::int64_t>(magnitude >> 64);
    // Each digit moves by less than 2^32 per addition: carry before 2^31 additions.
    if (++pending_ == (std::int64_t{1} << 30)) normalize();
  }

  // Digits 0..kDigits-2 in [0, 2^32), the top one signed.
  void normalize() {
    for (int i = 0; i + 1 < kDigits; ++i) {
      const std::int64_t carry = digits_[i] >> 32;  // floor division (arithmetic shift)
      digits_[i] -= carry * (std::int64_t{1} << 32);
      digits_[i + 1] += carry;
    }
    pending_ = 0;
  }

  // The digits and the special-value counts, as int64 for MPI_SUM.
  std::array<std::int64_t, kDigits + 3> packed() {
    normalize();
    std::array<std::int64_t, kDigits + 3> out{};
    for (int i = 0; i < kDigits; ++i) out[i] = digits_[i];
    for (int k = 0; k < 3; ++k) out[kDigits + k] = specials_[k];
    return out;
  }

  // The sum of accumulators (packed, already added up), rounded to nearest-even.
  static double round(std::array<std::int64_t, kDigits + 3> sum) {
    const std::int64_t nans = sum[kDigits], positive_inf = sum[kDigits + 1], negative_inf = sum[kDigits + 2];
    if (nans > 0 || (positive_inf > 0 && negative_inf > 0)) return std::numeric_limits<double>::quiet_NaN();
    if (positive_inf > 0) return std::numeric_limits<double>::infinity();
    if (negative_inf > 0) return -std::numeric_limits<double>::infinity();
    ExactAccumulator a;
    for (int i = 0; i < kDigits; ++i) a.digits_[i] = sum[i];
    a.normalize();
    double sign = 1.0;
    if (a.digits_[kDigits - 1] < 0) {  // negative: round the magnitude
      sign = -1.0;
      for (auto& d : a.digits_) d = -d;
      a.normalize();
    }
    int top = kDigits - 1;
    while (top >= 0 && a.digits_[top] == 0) --top;
    if (top < 0) return 0.0;
    // The top three digits (up to 96 bits), and whether anything lies below them.
    const auto digit = [&](int i) { return i >= 0 ? static_cast<unsigned __int128>(a.digits_[i]) : 0; };
    const unsigned __int128 head = (digit(top) << 64) | (digit(top - 1) << 32) | digit(top - 2);
    bool sticky = false;
    for (int i = top - 3; i >= 0; --i) sticky = sticky || a.digits_[i] != 0;
    int bits = 0;
    for (unsigned __int128 h = head; h != 0; h >>= 1) ++bits;
    const int drop = bits > 53 ? bits - 53 : 0;
    auto mantissa = static_cast<std::uint64_t>(head >> drop);
    if (drop > 0) {
      const unsigned __int128 rest = head & ((static_cast<unsigned __int128>(1) << drop) - 1);
      const unsigned __int128 half = static_cast<unsigned __int128>(1) << (drop - 1);
      if (rest > half || (rest == half && (sticky || (mantissa & 1u)))) ++mantissa;
    }
    // Values below 2^-1022 are exact multiples of 2^-1074 with at most 52 bits, so they
    // were not rounded above: ldexp's result is exact there too.
    return sign * std::ldexp(static_cast<double>(mantissa), drop + 32 * (top - 2) - kOffset);
  }

 private:
  std::array<std::int64_t, kDigits> digits_{};
  std::array<std::int64_t, 3> specials_{};  // NaN, +inf, -inf
  std::int64_t pending_ = 0;
};

template <class T>
void accumulate(ExactAccumulator& a, const Tensor& block) {
  const T* p = block.data<T>();
  const std::int64_t n = block.numel();
  for (std::int64_t i = 0; i < n; ++i) a.add(static_cast<double>(static_cast<float>(p[i])));
}
template <>
void accumulate<double>(ExactAccumulator& a, const Tensor& block) {
  const double* p = block.data<double>();
  const std::int64_t n = block.numel();
  for (std::int64_t i = 0; i < n; ++i) a.add(p[i]);
}

}  // namespace

struct ExactSums::State {
  std::vector<ExactAccumulator> sums;
};

ExactSums::ExactSums(std::size_t count) : state_(std::make_unique<State>()) { state_->sums.resize(count); }
ExactSums::~ExactSums() = default;
ExactSums::ExactSums(ExactSums&&) noexcept = default;
ExactSums& ExactSums::operator=(ExactSums&&) noexcept = default;

std::size_t ExactSums::size() const { return state_->sums.size(); }

void ExactSums::add(std::size_t index, double value) { state_->sums.at(index).add(value); }

namespace {

constexpr std::size_t kPacked = ExactAccumulator::kDigits + 3;
using Packed = std::array<std::int64_t, kPacked>;

// Every rank's accumulators added as integers (any reduction order gives the same
// digits). Collective over `comm`.
std::vector<Packed> reduce(Communicator& comm, std::vector<ExactAccumulator> sums) {
  std::vector<std::int64_t> packed;
  for (ExactAccumulator& a : sums) {
    const auto p = a.packed();
    packed.insert(packed.end(), p.begin(), p.end());
  }
  // Every digit is below 2^32 in magnitude: int64 sums of up to 2^31 ranks cannot wrap.
  Tensor digits = Tensor::from_vector(packed, {static_cast<std::int64_t>(packed.size())});
  comm.all_reduce(digits);
  std::vector<Packed> out(sums.size());
  const std::int64_t* d = digits.data<std::int64_t>();
  for (std::size_t k = 0; k < sums.size(); ++k) {
    for (std::size_t i = 0; i < kPacked; ++i) out[k][i] = d[k * kPacked + i];
  }
  return out;
}

std::vector<double> reduce_and_round(Communicator& comm, std::vector<ExactAccumulator> sums) {
  std::vector<double> out;
  for (const Packed& total : reduce(comm, std::move(sums))) out.push_back(ExactAccumulator::round(total));
  return out;
}

}  // namespace

std::vector<double> ExactSums::totals(Communicator& comm) const { return reduce_and_round(comm, state_->sums); }

std::vector<std::pair<double, double>> ExactSums::totals_split(Communicator& comm) const {
  std::vector<std::pair<double, double>> out;
  for (Packed total : reduce(comm, state_->sums)) {
    const double hi = ExactAccumulator::round(total);
    if (!std::isfinite(hi)) {
      out.emplace_back(hi, 0.0);
      continue;
    }
    // The rest: the exact sum minus hi, added digit by digit (as the reduction does).
    ExactAccumulator minus_hi;
    minus_hi.add(-hi);
    const Packed p = minus_hi.packed();
    for (std::size_t i = 0; i < ExactAccumulator::kDigits; ++i) total[i] += p[i];
    out.emplace_back(hi, ExactAccumulator::round(total));
  }
  return out;
}

double global_sum(const Decomposition& d, const Tensor& local) {
  ExactAccumulator sum;
  agree_on_success(d.comm().mpi_comm(), [&] {
    require_usable(local, "global_sum");
    if (local.dim() < 2) {
      throw ShapeError("global_sum: the local field " + local.str() + " needs the two dims lat and lon");
    }
    const Shape leading(local.shape().begin(), local.shape().end() - 2);
    if (local.shape() != d.local_shape(leading)) {
      throw ShapeError("global_sum: domain rank " + std::to_string(d.rank()) + " passed " + local.str() +
                       ", but it owns " + d.box().str() + ": expected shape " + shape_str(d.local_shape(leading)) +
                       " (for a halo-padded field, pass HaloExchange::interior)");
    }
    if (local.dtype() != DType::f32 && local.dtype() != DType::f64 && local.dtype() != DType::bf16) {
      throw InvalidArgument("global_sum: dtype " + std::string(dtype_name(local.dtype())) +
                            " is not f32, f64 or bf16");
    }
    const Tensor host = local.to(Device::host()).contiguous();
    ExactAccumulator a;
    switch (host.dtype()) {
      case DType::f64: accumulate<double>(a, host); break;
      case DType::f32: accumulate<float>(a, host); break;
      default: accumulate<bfloat16>(a, host); break;
    }
    sum = a;
  });
  return reduce_and_round(d.comm(), {sum}).front();
}

}  // namespace tessera::domain
